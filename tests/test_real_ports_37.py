# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):

- the masked autoencoder of facebookresearch/mae (``models_mae.py``, ``util/pos_embed.py``,
  ``util/lr_sched.py`` and the step of ``engine_pretrain.py``) over timm 0.3.2's
  ``PatchEmbed``/``Attention``/``Mlp``/``Block`` (``timm/models/vision_transformer.py``, the
  version MAE pins), small (16x16 images, 4x4 patches, widths 16/8): the 2-d sine-cosine
  positions built in NumPy (``np.meshgrid``, ``np.einsum('m,d->md', ...)``) and written by
  ``self.pos_embed.data.copy_(torch.from_numpy(pos_embed).float().unsqueeze(0))`` into an
  ``nn.Parameter(..., requires_grad=False)``; the patch projection initialised through a view,
  ``torch.nn.init.xavier_uniform_(w.view([w.shape[0], -1]))`` of ``proj.weight.data``;
  ``nn.init.normal_(self.cls_token, std=.02)``; ``self.apply(self._init_weights)``;
  ``random_masking`` (``torch.rand(N, L, device=x.device)``, ``torch.argsort`` twice,
  ``torch.gather(x, dim=1, index=ids_keep.unsqueeze(-1).repeat(1, 1, D))``, ``mask[:,
  :len_keep] = 0`` then gathered back); ``patchify``/``unpatchify`` by ``imgs.reshape(shape=(...))``
  (torch's keyword) and the one-operand ``torch.einsum('nchpwq->nhwpqc', x)``; the decoder's
  ``self.mask_token.repeat(x.shape[0], ids_restore.shape[1] + 1 - x.shape[1], 1)`` and
  unshuffle by ``gather``; ``forward_loss`` with ``norm_pix_loss`` (``target.var(dim=-1,
  keepdim=True)``, ``(var + 1.e-6)**.5``) and the masked mean ``(loss * mask).sum() /
  mask.sum()``; norm layers as ``partial(nn.LayerNorm, eps=1e-6)``; timm's
  ``add_weight_decay`` parameter groups, AdamW with ``betas=(0.9, 0.95)``, the per-iteration
  half-cycle cosine ``adjust_learning_rate(optimizer, data_iter_step / len(data_loader) +
  epoch, args)`` with warmup, gradient accumulation (``loss /= accum_iter``, a step every
  ``accum_iter`` iterations), and the reconstruction by ``unpatchify`` and
  ``torch.einsum('nchw->nhwc', ...)`` as the visualisation notebook does.

``torch.rand`` draws from one seeded stream in both runs; the run is in float64. The lines
changed: the gradient lines (MAE's ``NativeScaler`` call, which runs ``loss.backward()`` and
``optimizer.step()`` every ``accum_iter`` iterations, is written out as those lines; the port
sums the accumulated gradients, ``grads = g if grads is None else grads + g``).

The defect found: ``torch.gather(x, dim=1, index=...)`` was refused (``gather`` named its
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
import collections.abc
from functools import partial
from itertools import repeat


# timm/models/layers/helpers.py
def _ntuple(n):
    def parse(x):
        if isinstance(x, collections.abc.Iterable):
            return x
        return tuple(repeat(x, n))
    return parse


to_2tuple = _ntuple(2)


# timm/models/vision_transformer.py (0.3.2)
class Mlp(nn.Module):
    def __init__(self, in_features, hidden_features=None, out_features=None, act_layer=nn.GELU, drop=0.):
        super().__init__()
        out_features = out_features or in_features
        hidden_features = hidden_features or in_features
        self.fc1 = nn.Linear(in_features, hidden_features)
        self.act = act_layer()
        self.fc2 = nn.Linear(hidden_features, out_features)
        self.drop = nn.Dropout(drop)

    def forward(self, x):
        x = self.fc1(x)
        x = self.act(x)
        x = self.drop(x)
        x = self.fc2(x)
        x = self.drop(x)
        return x


class Attention(nn.Module):
    def __init__(self, dim, num_heads=8, qkv_bias=False, qk_scale=None, attn_drop=0., proj_drop=0.):
        super().__init__()
        self.num_heads = num_heads
        head_dim = dim // num_heads
        # NOTE scale factor was wrong in my original version, can set manually to be compat with prev weights
        self.scale = qk_scale or head_dim ** -0.5

        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.attn_drop = nn.Dropout(attn_drop)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)

    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, C // self.num_heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]   # make torchscript happy (cannot use tensor as tuple)

        attn = (q @ k.transpose(-2, -1)) * self.scale
        attn = attn.softmax(dim=-1)
        attn = self.attn_drop(attn)

        x = (attn @ v).transpose(1, 2).reshape(B, N, C)
        x = self.proj(x)
        x = self.proj_drop(x)
        return x


class Block(nn.Module):

    def __init__(self, dim, num_heads, mlp_ratio=4., qkv_bias=False, qk_scale=None, drop=0., attn_drop=0.,
                 drop_path=0., act_layer=nn.GELU, norm_layer=nn.LayerNorm):
        super().__init__()
        self.norm1 = norm_layer(dim)
        self.attn = Attention(
            dim, num_heads=num_heads, qkv_bias=qkv_bias, qk_scale=qk_scale, attn_drop=attn_drop, proj_drop=drop)
        # NOTE: drop path for stochastic depth, we shall see if this is better than dropout here
        self.drop_path = nn.Identity()
        self.norm2 = norm_layer(dim)
        mlp_hidden_dim = int(dim * mlp_ratio)
        self.mlp = Mlp(in_features=dim, hidden_features=mlp_hidden_dim, act_layer=act_layer, drop=drop)

    def forward(self, x):
        x = x + self.drop_path(self.attn(self.norm1(x)))
        x = x + self.drop_path(self.mlp(self.norm2(x)))
        return x


class PatchEmbed(nn.Module):
    \"\"\" Image to Patch Embedding
    \"\"\"
    def __init__(self, img_size=224, patch_size=16, in_chans=3, embed_dim=768):
        super().__init__()
        img_size = to_2tuple(img_size)
        patch_size = to_2tuple(patch_size)
        num_patches = (img_size[1] // patch_size[1]) * (img_size[0] // patch_size[0])
        self.img_size = img_size
        self.patch_size = patch_size
        self.num_patches = num_patches

        self.proj = nn.Conv2d(in_chans, embed_dim, kernel_size=patch_size, stride=patch_size)

    def forward(self, x):
        B, C, H, W = x.shape
        # FIXME look at relaxing size constraints
        assert H == self.img_size[0] and W == self.img_size[1], \\
            f"Input image size ({H}*{W}) doesn't match model ({self.img_size[0]}*{self.img_size[1]})."
        x = self.proj(x).flatten(2).transpose(1, 2)
        return x


# util/pos_embed.py
def get_2d_sincos_pos_embed(embed_dim, grid_size, cls_token=False):
    grid_h = np.arange(grid_size, dtype=np.float32)
    grid_w = np.arange(grid_size, dtype=np.float32)
    grid = np.meshgrid(grid_w, grid_h)  # here w goes first
    grid = np.stack(grid, axis=0)

    grid = grid.reshape([2, 1, grid_size, grid_size])
    pos_embed = get_2d_sincos_pos_embed_from_grid(embed_dim, grid)
    if cls_token:
        pos_embed = np.concatenate([np.zeros([1, embed_dim]), pos_embed], axis=0)
    return pos_embed


def get_2d_sincos_pos_embed_from_grid(embed_dim, grid):
    assert embed_dim % 2 == 0

    # use half of dimensions to encode grid_h
    emb_h = get_1d_sincos_pos_embed_from_grid(embed_dim // 2, grid[0])  # (H*W, D/2)
    emb_w = get_1d_sincos_pos_embed_from_grid(embed_dim // 2, grid[1])  # (H*W, D/2)

    emb = np.concatenate([emb_h, emb_w], axis=1) # (H*W, D)
    return emb


def get_1d_sincos_pos_embed_from_grid(embed_dim, pos):
    assert embed_dim % 2 == 0
    omega = np.arange(embed_dim // 2, dtype=np.float32)
    omega /= embed_dim / 2.
    omega = 1. / 10000**omega  # (D/2,)

    pos = pos.reshape(-1)  # (M,)
    out = np.einsum('m,d->md', pos, omega)  # (M, D/2), outer product

    emb_sin = np.sin(out) # (M, D/2)
    emb_cos = np.cos(out) # (M, D/2)

    emb = np.concatenate([emb_sin, emb_cos], axis=1)  # (M, D)
    return emb


# models_mae.py
class MaskedAutoencoderViT(nn.Module):
    \"\"\" Masked Autoencoder with VisionTransformer backbone
    \"\"\"
    def __init__(self, img_size=224, patch_size=16, in_chans=3,
                 embed_dim=1024, depth=24, num_heads=16,
                 decoder_embed_dim=512, decoder_depth=8, decoder_num_heads=16,
                 mlp_ratio=4., norm_layer=nn.LayerNorm, norm_pix_loss=False):
        super().__init__()

        # --------------------------------------------------------------------------
        # MAE encoder specifics
        self.patch_embed = PatchEmbed(img_size, patch_size, in_chans, embed_dim)
        num_patches = self.patch_embed.num_patches

        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, num_patches + 1, embed_dim), requires_grad=False)  # fixed sin-cos embedding

        self.blocks = nn.ModuleList([
            Block(embed_dim, num_heads, mlp_ratio, qkv_bias=True, qk_scale=None, norm_layer=norm_layer)
            for i in range(depth)])
        self.norm = norm_layer(embed_dim)
        # --------------------------------------------------------------------------

        # --------------------------------------------------------------------------
        # MAE decoder specifics
        self.decoder_embed = nn.Linear(embed_dim, decoder_embed_dim, bias=True)

        self.mask_token = nn.Parameter(torch.zeros(1, 1, decoder_embed_dim))

        self.decoder_pos_embed = nn.Parameter(torch.zeros(1, num_patches + 1, decoder_embed_dim), requires_grad=False)  # fixed sin-cos embedding

        self.decoder_blocks = nn.ModuleList([
            Block(decoder_embed_dim, decoder_num_heads, mlp_ratio, qkv_bias=True, qk_scale=None, norm_layer=norm_layer)
            for i in range(decoder_depth)])

        self.decoder_norm = norm_layer(decoder_embed_dim)
        self.decoder_pred = nn.Linear(decoder_embed_dim, patch_size**2 * in_chans, bias=True) # decoder to patch
        # --------------------------------------------------------------------------

        self.norm_pix_loss = norm_pix_loss

        self.initialize_weights()

    def initialize_weights(self):
        # initialization
        # initialize (and freeze) pos_embed by sin-cos embedding
        pos_embed = get_2d_sincos_pos_embed(self.pos_embed.shape[-1], int(self.patch_embed.num_patches**.5), cls_token=True)
        self.pos_embed.data.copy_(torch.from_numpy(pos_embed).float().unsqueeze(0))

        decoder_pos_embed = get_2d_sincos_pos_embed(self.decoder_pos_embed.shape[-1], int(self.patch_embed.num_patches**.5), cls_token=True)
        self.decoder_pos_embed.data.copy_(torch.from_numpy(decoder_pos_embed).float().unsqueeze(0))

        # initialize patch_embed like nn.Linear (instead of nn.Conv2d)
        w = self.patch_embed.proj.weight.data
        torch.nn.init.xavier_uniform_(w.view([w.shape[0], -1]))

        # timm's trunc_normal_(std=.02) is effectively normal_(std=0.02) as cutoff is too big (2.)
        torch.nn.init.normal_(self.cls_token, std=.02)
        torch.nn.init.normal_(self.mask_token, std=.02)

        # initialize nn.Linear and nn.LayerNorm
        self.apply(self._init_weights)

    def _init_weights(self, m):
        if isinstance(m, nn.Linear):
            # we use xavier_uniform following official JAX ViT:
            torch.nn.init.xavier_uniform_(m.weight)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.constant_(m.bias, 0)
        elif isinstance(m, nn.LayerNorm):
            nn.init.constant_(m.bias, 0)
            nn.init.constant_(m.weight, 1.0)

    def patchify(self, imgs):
        \"\"\"
        imgs: (N, 3, H, W)
        x: (N, L, patch_size**2 *3)
        \"\"\"
        p = self.patch_embed.patch_size[0]
        assert imgs.shape[2] == imgs.shape[3] and imgs.shape[2] % p == 0

        h = w = imgs.shape[2] // p
        x = imgs.reshape(shape=(imgs.shape[0], 3, h, p, w, p))
        x = torch.einsum('nchpwq->nhwpqc', x)
        x = x.reshape(shape=(imgs.shape[0], h * w, p**2 * 3))
        return x

    def unpatchify(self, x):
        \"\"\"
        x: (N, L, patch_size**2 *3)
        imgs: (N, 3, H, W)
        \"\"\"
        p = self.patch_embed.patch_size[0]
        h = w = int(x.shape[1]**.5)
        assert h * w == x.shape[1]

        x = x.reshape(shape=(x.shape[0], h, w, p, p, 3))
        x = torch.einsum('nhwpqc->nchpwq', x)
        imgs = x.reshape(shape=(x.shape[0], 3, h * p, h * p))
        return imgs

    def random_masking(self, x, mask_ratio):
        \"\"\"
        Perform per-sample random masking by per-sample shuffling.
        Per-sample shuffling is done by argsort random noise.
        x: [N, L, D], sequence
        \"\"\"
        N, L, D = x.shape  # batch, length, dim
        len_keep = int(L * (1 - mask_ratio))

        noise = torch.rand(N, L, device=x.device)  # noise in [0, 1]

        # sort noise for each sample
        ids_shuffle = torch.argsort(noise, dim=1)  # ascend: small is keep, large is remove
        ids_restore = torch.argsort(ids_shuffle, dim=1)

        # keep the first subset
        ids_keep = ids_shuffle[:, :len_keep]
        x_masked = torch.gather(x, dim=1, index=ids_keep.unsqueeze(-1).repeat(1, 1, D))

        # generate the binary mask: 0 is keep, 1 is remove
        mask = torch.ones([N, L], device=x.device)
        mask[:, :len_keep] = 0
        # unshuffle to get the binary mask
        mask = torch.gather(mask, dim=1, index=ids_restore)

        return x_masked, mask, ids_restore

    def forward_encoder(self, x, mask_ratio):
        # embed patches
        x = self.patch_embed(x)

        # add pos embed w/o cls token
        x = x + self.pos_embed[:, 1:, :]

        # masking: length -> length * mask_ratio
        x, mask, ids_restore = self.random_masking(x, mask_ratio)

        # append cls token
        cls_token = self.cls_token + self.pos_embed[:, :1, :]
        cls_tokens = cls_token.expand(x.shape[0], -1, -1)
        x = torch.cat((cls_tokens, x), dim=1)

        # apply Transformer blocks
        for blk in self.blocks:
            x = blk(x)
        x = self.norm(x)

        return x, mask, ids_restore

    def forward_decoder(self, x, ids_restore):
        # embed tokens
        x = self.decoder_embed(x)

        # append mask tokens to sequence
        mask_tokens = self.mask_token.repeat(x.shape[0], ids_restore.shape[1] + 1 - x.shape[1], 1)
        x_ = torch.cat([x[:, 1:, :], mask_tokens], dim=1)  # no cls token
        x_ = torch.gather(x_, dim=1, index=ids_restore.unsqueeze(-1).repeat(1, 1, x.shape[2]))  # unshuffle
        x = torch.cat([x[:, :1, :], x_], dim=1)  # append cls token

        # add pos embed
        x = x + self.decoder_pos_embed

        # apply Transformer blocks
        for blk in self.decoder_blocks:
            x = blk(x)
        x = self.decoder_norm(x)

        # predictor projection
        x = self.decoder_pred(x)

        # remove cls token
        x = x[:, 1:, :]

        return x

    def forward_loss(self, imgs, pred, mask):
        \"\"\"
        imgs: [N, 3, H, W]
        pred: [N, L, p*p*3]
        mask: [N, L], 0 is keep, 1 is remove,
        \"\"\"
        target = self.patchify(imgs)
        if self.norm_pix_loss:
            mean = target.mean(dim=-1, keepdim=True)
            var = target.var(dim=-1, keepdim=True)
            target = (target - mean) / (var + 1.e-6)**.5

        loss = (pred - target) ** 2
        loss = loss.mean(dim=-1)  # [N, L], mean loss per patch

        loss = (loss * mask).sum() / mask.sum()  # mean loss on removed patches
        return loss

    def forward(self, imgs, mask_ratio=0.75):
        latent, mask, ids_restore = self.forward_encoder(imgs, mask_ratio)
        pred = self.forward_decoder(latent, ids_restore)  # [N, L, p*p*3]
        loss = self.forward_loss(imgs, pred, mask)
        return loss, pred, mask


def mae_vit_tiny_patch4(**kwargs):  # the test's size, written as mae_vit_base_patch16_dec512d8b
    model = MaskedAutoencoderViT(
        img_size=16, patch_size=4, embed_dim=16, depth=2, num_heads=2,
        decoder_embed_dim=8, decoder_depth=1, decoder_num_heads=2,
        mlp_ratio=4, norm_layer=partial(nn.LayerNorm, eps=1e-6), **kwargs)
    return model


# timm/optim/optim_factory.py
def add_weight_decay(model, weight_decay=1e-5, skip_list=()):
    decay = []
    no_decay = []
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue  # frozen weights
        if len(param.shape) == 1 or name.endswith(".bias") or name in skip_list:
            no_decay.append(param)
        else:
            decay.append(param)
    return [
        {'params': no_decay, 'weight_decay': 0.},
        {'params': decay, 'weight_decay': weight_decay}]


# util/lr_sched.py
def adjust_learning_rate(optimizer, epoch, args):
    \"\"\"Decay the learning rate with half-cycle cosine after warmup\"\"\"
    if epoch < args.warmup_epochs:
        lr = args.lr * epoch / args.warmup_epochs
    else:
        lr = args.min_lr + (args.lr - args.min_lr) * 0.5 * \\
            (1. + math.cos(math.pi * (epoch - args.warmup_epochs) / (args.epochs - args.warmup_epochs)))
    for param_group in optimizer.param_groups:
        if "lr_scale" in param_group:
            param_group["lr"] = lr * param_group["lr_scale"]
        else:
            param_group["lr"] = lr
    return lr


# engine_pretrain.py, the loop of train_one_epoch
def train_one_epoch(model, data_loader, optimizer, epoch, args):
    model.train(True)
    accum_iter = args.accum_iter
    optimizer.zero_grad()
    grads = None
    for data_iter_step, (samples, _) in enumerate(data_loader):

        # we use a per iteration (instead of per epoch) lr scheduler
        if data_iter_step % accum_iter == 0:
            lrs.append(adjust_learning_rate(optimizer, data_iter_step / len(data_loader) + epoch, args))

        loss, _, _ = model(samples, mask_ratio=args.mask_ratio)

        loss_value = loss.item()

        if not math.isfinite(loss_value):
            print("Loss is {}, stopping training".format(loss_value))
            sys.exit(1)

        loss /= accum_iter
        loss.backward()
        if (data_iter_step + 1) % accum_iter == 0:
            optimizer.step()
            optimizer.zero_grad()

        losses.append(loss_value)


def main(args, dataset):
    model = mae_vit_tiny_patch4(norm_pix_loss=args.norm_pix_loss)
    initialize(model)
    data_loader_train = torch.utils.data.DataLoader(dataset, batch_size=args.batch_size, drop_last=True)
    param_groups = add_weight_decay(model, args.weight_decay)
    optimizer = torch.optim.AdamW(param_groups, lr=args.lr, betas=(0.9, 0.95))
    for epoch in range(args.start_epoch, args.epochs):
        train_one_epoch(model, data_loader_train, optimizer, epoch, args)
    # the visualisation notebook's reconstruction
    model.eval()
    x = dataset[0][0].unsqueeze(0)
    loss, y, mask = model(x, mask_ratio=0.75)
    y = model.unpatchify(y)
    y = torch.einsum('nchw->nhwc', y).detach()
    mask = mask.detach()
    mask = mask.unsqueeze(-1).repeat(1, 1, model.patch_embed.patch_size[0]**2 *3)  # (N, H*W, p*p*3)
    mask = model.unpatchify(mask)  # 1 is removing, 0 is keeping
    mask = torch.einsum('nchw->nhwc', mask).detach()
    im_paste = torch.einsum('nchw->nhwc', x) * (1 - mask) + y * mask
    return model, [loss.item(), y.numpy(), mask.numpy(), im_paste.numpy()]
"""

MAE_STEP = [
    (
        "        loss.backward()\n",
        "        g = loss.backward()\n        grads = g if grads is None else grads + g\n",
    ),
    (
        "            optimizer.step()\n",
        "            optimizer.step(grads)\n            grads = None\n",
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
