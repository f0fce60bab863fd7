"""A program written here in the style of facebookresearch/mae (a masked autoencoder ViT with
its sine-cosine positions, random masking, pixel loss, weight-decay groups, a per-iteration
warmup-cosine schedule and gradient accumulation), run under torch and, ported, under retrograd
from the same weights and mask draws (the harness: ``tests/real_ports.py``), small (16x16
images, 4x4 patches, widths 16/8), in float64.

What it exercises: 2-d sine-cosine positions built in NumPy (``np.meshgrid``,
``np.einsum("m,d->md", ...)``) and written by ``pos.data.copy_(torch.from_numpy(table).float()
.unsqueeze(0))`` into an ``nn.Parameter(..., requires_grad=False)``; the patch projection
initialised through a view, ``torch.nn.init.xavier_uniform_(weight.view([weight.shape[0],
-1]))`` of ``proj.weight.data``; ``nn.init.normal_(self.cls_token, std=.02)``; ``self.apply(...)``;
random masking (``torch.rand(N, L, device=x.device)``, ``torch.argsort`` twice,
``torch.gather(x, dim=1, index=keep.unsqueeze(-1).repeat(1, 1, D))``, ``mask[:, :n_keep] = 0``
then gathered back); patchify/unpatchify by ``imgs.reshape(shape=(...))`` (torch's keyword) and
the one-operand ``torch.einsum("nchpwq->nhwpqc", x)``; the decoder's ``self.mask_token.repeat(
N, L + 1 - x.shape[1], 1)`` and unshuffle by ``gather``; the loss with ``norm_pix_loss``
(``target.var(dim=-1, keepdim=True)``, ``(var + 1.e-6) ** .5``) and the masked mean ``(loss *
mask).sum() / mask.sum()``; norms as ``partial(nn.LayerNorm, eps=1e-6)``; weight-decay parameter
groups, AdamW with ``betas=(0.9, 0.95)``, a per-iteration warmup then half-cycle cosine learning
rate written into ``param_groups`` (``"lr_scale" in group``), gradient accumulation (``loss /=
accum``, a step every ``accum`` iterations), and the reconstruction pasted by ``unpatchify`` and
``torch.einsum("nchw->nhwc", ...)`` as MAE's visualisation does.

``torch.rand`` draws from one seeded stream in both runs. The port changes the gradient lines
(it sums the accumulated gradients, ``grads = g if grads is None else grads + g``).

The defect it guards: ``torch.gather(x, dim=1, index=...)`` was refused (``gather`` named its
argument ``indices``, Burn's name; torch's keyword is ``index``; both are taken now). A sweep of
torch's keyword names beside it found two more: ``torch.split(x, split_size_or_sections=...)``
and ``torch.max(x, other=y)`` / ``x.min(other=y)`` (``tests/test_realports6_fixes.py``).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import assert_records_agree, port, run_source

MAE_SOURCE = """
from functools import partial


def sincos_1d(dim, positions):
    freqs = 1.0 / 10000 ** (np.arange(dim // 2, dtype=np.float64) / (dim / 2.0))
    angles = np.einsum("m,d->md", positions.reshape(-1), freqs)
    return np.concatenate([np.sin(angles), np.cos(angles)], axis=1)


def sincos_2d(dim, side, with_cls=False):
    axis = np.arange(side, dtype=np.float64)
    rows, cols = np.meshgrid(axis, axis)
    table = np.concatenate([sincos_1d(dim // 2, rows), sincos_1d(dim // 2, cols)], axis=1)
    if with_cls:
        table = np.concatenate([np.zeros([1, dim]), table], axis=0)
    return table


class Block(nn.Module):
    # pre-norm transformer block: fused qkv attention, then a GELU MLP
    def __init__(self, dim, heads, ratio, norm):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = norm(dim), norm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)
        hidden = ratio * dim
        self.mlp = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim))

    def forward(self, x):
        B, N, C = x.shape
        d = C // self.heads
        q, k, v = self.qkv(self.norm1(x)).reshape(B, N, 3, self.heads, d).permute(2, 0, 3, 1, 4)
        att = (q @ k.transpose(-2, -1) * d ** -0.5).softmax(dim=-1)
        x = x + self.out((att @ v).transpose(1, 2).reshape(B, N, C))
        return x + self.mlp(self.norm2(x))


class TinyMAE(nn.Module):
    def __init__(self, size=16, patch=4, dim=16, dec_dim=8, heads=2, ratio=2,
                 norm_pix_loss=False, norm=partial(nn.LayerNorm, eps=1e-6)):
        super().__init__()
        self.patch, self.side = patch, size // patch
        n = self.side ** 2
        self.proj = nn.Conv2d(3, dim, kernel_size=patch, stride=patch)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(torch.zeros(1, n + 1, dim), requires_grad=False)
        self.encoder = nn.Sequential(Block(dim, heads, ratio, norm), norm(dim))
        self.to_decoder = nn.Linear(dim, dec_dim)
        self.mask_token = nn.Parameter(torch.zeros(1, 1, dec_dim))
        self.dec_pos = nn.Parameter(torch.zeros(1, n + 1, dec_dim), requires_grad=False)
        self.decoder = nn.Sequential(Block(dec_dim, heads, ratio, norm), norm(dec_dim))
        self.to_pixels = nn.Linear(dec_dim, patch * patch * 3)
        self.normalize_targets = norm_pix_loss
        self.reset()

    def reset(self):
        for param in (self.pos, self.dec_pos):
            table = sincos_2d(param.shape[-1], self.side, with_cls=True)
            param.data.copy_(torch.from_numpy(table).float().unsqueeze(0))
        weight = self.proj.weight.data  # as a Linear's: fan-in over all of a patch
        torch.nn.init.xavier_uniform_(weight.view([weight.shape[0], -1]))
        nn.init.normal_(self.cls_token, std=.02)
        nn.init.normal_(self.mask_token, std=.02)
        self.apply(self._reset_layer)

    def _reset_layer(self, m):
        if isinstance(m, nn.Linear):
            nn.init.xavier_uniform_(m.weight)
            nn.init.constant_(m.bias, 0)
        if isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)

    def patchify(self, imgs):
        p, h = self.patch, imgs.shape[2] // self.patch
        x = imgs.reshape(shape=(imgs.shape[0], 3, h, p, h, p))
        return torch.einsum("nchpwq->nhwpqc", x).reshape(shape=(imgs.shape[0], h * h, p * p * 3))

    def unpatchify(self, x):
        p, h = self.patch, int(x.shape[1] ** 0.5)
        x = torch.einsum("nhwpqc->nchpwq", x.reshape(shape=(x.shape[0], h, h, p, p, 3)))
        return x.reshape(shape=(x.shape[0], 3, h * p, h * p))

    def shuffle_and_drop(self, x, ratio):
        N, L, D = x.shape
        n_keep = int(L * (1 - ratio))
        order = torch.argsort(torch.rand(N, L, device=x.device), dim=1)
        restore = torch.argsort(order, dim=1)
        keep = order[:, :n_keep]
        kept = torch.gather(x, dim=1, index=keep.unsqueeze(-1).repeat(1, 1, D))
        mask = torch.ones(N, L, device=x.device)
        mask[:, :n_keep] = 0
        return kept, torch.gather(mask, dim=1, index=restore), restore

    def encode(self, imgs, ratio):
        x = self.proj(imgs).flatten(2).transpose(1, 2) + self.pos[:, 1:, :]
        x, mask, restore = self.shuffle_and_drop(x, ratio)
        cls = (self.cls_token + self.pos[:, :1, :]).expand(x.shape[0], -1, -1)
        return self.encoder(torch.cat([cls, x], dim=1)), mask, restore

    def decode(self, x, restore):
        x = self.to_decoder(x)
        fill = self.mask_token.repeat(x.shape[0], restore.shape[1] + 1 - x.shape[1], 1)
        body = torch.cat([x[:, 1:, :], fill], dim=1)
        body = torch.gather(body, dim=1, index=restore.unsqueeze(-1).repeat(1, 1, x.shape[2]))
        x = torch.cat([x[:, :1, :], body], dim=1) + self.dec_pos
        return self.to_pixels(self.decoder(x))[:, 1:, :]

    def loss(self, imgs, pred, mask):
        target = self.patchify(imgs)
        if self.normalize_targets:
            mean, var = target.mean(dim=-1, keepdim=True), target.var(dim=-1, keepdim=True)
            target = (target - mean) / (var + 1.e-6) ** .5
        per_patch = ((pred - target) ** 2).mean(dim=-1)
        return (per_patch * mask).sum() / mask.sum()  # only the hidden patches count

    def forward(self, imgs, mask_ratio: float = 0.75):
        latent, mask, restore = self.encode(imgs, mask_ratio)
        pred = self.decode(latent, restore)
        return self.loss(imgs, pred, mask), pred, mask


def decay_groups(model, weight_decay):
    flat, other = [], []
    for name, p in model.named_parameters():
        if p.requires_grad:
            (flat if p.ndim == 1 or name.endswith(".bias") else other).append(p)
    return [
        {"params": flat, "weight_decay": 0.0},
        {"params": other, "weight_decay": weight_decay},
    ]


def set_lr(optimizer, progress, args):
    if progress < args.warmup_epochs:
        lr = args.lr * progress / args.warmup_epochs
    else:
        phase = (progress - args.warmup_epochs) / (args.epochs - args.warmup_epochs)
        lr = args.min_lr + (args.lr - args.min_lr) * 0.5 * (1.0 + math.cos(math.pi * phase))
    for group in optimizer.param_groups:
        group["lr"] = lr * group["lr_scale"] if "lr_scale" in group else lr
    return lr


def main(args, dataset):
    model = TinyMAE(norm_pix_loss=args.norm_pix_loss)
    initialize(model)
    loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch_size, drop_last=True)
    groups = decay_groups(model, args.weight_decay)
    optimizer = torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.95))
    for epoch in range(int(args.start_epoch), int(args.epochs)):
        model.train(True)
        optimizer.zero_grad()
        grads = None
        for it, (imgs, _) in enumerate(loader):
            if it % args.accum_iter == 0:
                lrs.append(set_lr(optimizer, epoch + it / len(loader), args))
            loss, _, _ = model(imgs, mask_ratio=args.mask_ratio)
            value = loss.item()
            if not math.isfinite(value):
                raise RuntimeError(f"loss is {value}")
            loss /= args.accum_iter
            loss.backward()
            if (it + 1) % args.accum_iter == 0:
                optimizer.step()
                optimizer.zero_grad()
            losses.append(value)
    model.eval()  # reconstruct one image, the visible patches pasted over the prediction
    img = dataset[0][0].unsqueeze(0)
    loss, pred, mask = model(img, mask_ratio=0.75)
    recon = torch.einsum("nchw->nhwc", model.unpatchify(pred)).detach()
    mask = model.unpatchify(mask.detach().unsqueeze(-1).repeat(1, 1, model.patch ** 2 * 3))
    mask = torch.einsum("nchw->nhwc", mask).detach()
    pasted = torch.einsum("nchw->nhwc", img) * (1 - mask) + recon * mask
    return model, [loss.item(), recon.numpy(), mask.numpy(), pasted.numpy()]
"""

MAE_STEP = [
    (
        "            loss.backward()\n",
        "            g = loss.backward()\n            grads = g if grads is None else grads + g\n",
    ),
    (
        "                optimizer.step()\n",
        "                optimizer.step(grads)\n                grads = None\n",
    ),
]


def _uniform(lib, rng):
    """``torch.rand`` drawing from ``rng``."""
    return lambda *size, **_: lib.tensor(rng.uniform(size=size), dtype=lib.float64)


@pytest.mark.parametrize("norm_pix_loss, accum_iter", [(False, 1), (True, 2)])
def test_mae_pretraining_matches_torch(monkeypatch, norm_pix_loss, accum_iter):
    images = np.random.default_rng(40).standard_normal((8, 3, 16, 16))
    args = type(
        "Args",
        (),
        dict(
            norm_pix_loss=norm_pix_loss,
            accum_iter=accum_iter,
            batch_size=2,
            weight_decay=0.05,
            lr=1e-2,
            min_lr=1e-4,
            warmup_epochs=1,
            start_epoch=0,
            epochs=2,
            mask_ratio=0.75,
        ),
    )
    state, records = {}, []
    previous, our_previous = torch.get_default_dtype(), rg.get_default_dtype()
    try:
        for lib in (torch, rg):
            lib.set_default_dtype(lib.float64)

            def initialize(model):
                if not state:
                    state.update(
                        {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
                    )
                else:
                    model.load_state_dict({k: rg.tensor(v) for k, v in state.items()})

            monkeypatch.setattr(lib, "rand", _uniform(lib, np.random.default_rng(41)))
            torch.manual_seed(0)
            source = MAE_SOURCE if lib is torch else port(MAE_SOURCE, MAE_STEP)
            losses, lrs = [], []
            names = run_source(source, lib, initialize=initialize, losses=losses, lrs=lrs)
            dataset = lib.utils.data.TensorDataset(lib.tensor(images), lib.zeros(8))
            model, shown = names["main"](args, dataset)
            monkeypatch.undo()
            params = {n: p.detach().numpy().copy() for n, p in model.named_parameters()}
            records.append([losses, lrs, *shown, params])
    finally:
        torch.set_default_dtype(previous)
        rg.set_default_dtype(our_previous)
    assert records[0][1][0] == 0.0 and len(records[0][0]) == 8
    assert_records_agree(records[1], records[0], rtol=1e-8, atol=1e-10)


def test_xavier_init_through_a_view_of_data_writes_the_weight():
    """MAE's ``torch.nn.init.xavier_uniform_(w.view([w.shape[0], -1]))`` of ``weight.data``
    initialises the conv weight itself (the view shares its storage)."""
    for lib in (torch, rg):
        conv = lib.nn.Conv2d(3, 4, 2)
        w = conv.weight.data
        lib.nn.init.zeros_(w.view([w.shape[0], -1]))
        assert float(conv.weight.abs().sum()) == 0.0
