"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):

- a Swin Transformer written here in the style of microsoft/Swin-Transformer's
  ``models/swin_transformer.py`` (the eager path: no fused window kernels, no checkpointing),
  small (a 16x16 image, patch 2, window 4, ``embed_dim=8``, two stages) under an AdamW loop: a
  feed-forward block, ``to_windows`` (``x.view(b, h // ws, ws, w // ws, ws, c).permute(0, 1, 3,
  2, 4, 5)`` then ``.contiguous().view(-1, ws, ws, c)``) and ``from_windows`` (``int(windows
  .shape[0] / (h * w / ws / ws))``); window attention with its ``relative_position_bias_table``
  parameter, the ``relative_position_index`` buffer made by ``torch.stack(torch.meshgrid(
  [torch.arange(wh), torch.arange(ww)]))``, ``torch.flatten(grid, 1)``, ``flat[:, :, None] -
  flat[:, None, :]``, ``offsets[:, :, 0] += wh - 1`` and ``.sum(-1)``, indexed by
  ``self.relative_position_bias_table[self.relative_position_index.view(-1)]``, ``q = q *
  self.scale``, ``nn.Softmax``, the shifted windows' mask added by ``attn.view(n_win_b //
  n_win, n_win, heads, n, n) + mask.unsqueeze(1).unsqueeze(0)``; the blocks'
  ``regions[:, rows, cols, :] = label`` over ``slice``s, ``mask.masked_fill(mask != 0,
  float(-100.0)).masked_fill(mask == 0, float(0.0))``, ``register_buffer("attn_mask", None)``
  in unshifted blocks, ``torch.roll(y, shifts=(-shift, -shift), dims=(1, 2))``; patch merging
  by ``x[:, 0::2, 0::2, :]`` and ``torch.cat(quads, -1)``; the absolute position embedding
  off, ``[r.item() for r in torch.linspace(0, drop_path_rate, sum(depths))]`` sliced per stage,
  ``nn.AdaptiveAvgPool1d`` over ``x.transpose(1, 2)``, ``torch.flatten(x, 1)``,
  ``nn.init.trunc_normal_``, ``@torch.jit.ignore`` on the no-decay name lists, ``flops()``;
  ``extra_repr`` on the attention, blocks, merging and stages, and ``print(model)`` compared
  (the second stage's two unshifted blocks print as one repeated entry).

The drop path rate is 0 (timm's ``DropPath`` is ported with ConvNeXt, test_real_ports_44).
Only the gradient lines differ.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import assert_records_agree, port

SWIN_SOURCE = """
def pair(x):
    return x if isinstance(x, tuple) else (x, x)


def trunc_normal_(tensor, std=1.0):
    return nn.init.trunc_normal_(tensor, 0.0, std, -2.0, 2.0)


class FeedForward(nn.Module):
    def __init__(self, dim, hidden, act_layer=nn.GELU, drop=0.0):
        super().__init__()
        self.fc1, self.act, self.fc2 = nn.Linear(dim, hidden), act_layer(), nn.Linear(hidden, dim)
        self.drop = nn.Dropout(drop)

    def forward(self, x):
        return self.drop(self.fc2(self.drop(self.act(self.fc1(x)))))


def to_windows(x, ws):
    # (B, H, W, C) -> (B * number of windows, ws, ws, C)
    b, h, w, c = x.shape
    x = x.view(b, h // ws, ws, w // ws, ws, c).permute(0, 1, 3, 2, 4, 5)
    return x.contiguous().view(-1, ws, ws, c)


def from_windows(windows, ws, h, w):
    # the inverse of to_windows; the batch size is what the window count implies
    b = int(windows.shape[0] / (h * w / ws / ws))
    x = windows.view(b, h // ws, w // ws, ws, ws, -1).permute(0, 1, 3, 2, 4, 5)
    return x.contiguous().view(b, h, w, -1)


class WindowMSA(nn.Module):
    # multi-head self-attention inside each window, plus a learned bias per relative offset
    def __init__(self, dim, window_size, num_heads, qkv_bias=True, attn_drop=0.0, proj_drop=0.0):
        super().__init__()
        self.dim, self.window_size, self.num_heads = dim, window_size, num_heads
        self.scale = (dim // num_heads) ** -0.5
        wh, ww = window_size
        table = torch.zeros((2 * wh - 1) * (2 * ww - 1), num_heads)  # one row per relative offset
        self.relative_position_bias_table = nn.Parameter(table)
        grid = torch.stack(torch.meshgrid([torch.arange(wh), torch.arange(ww)]))  # 2, wh, ww
        flat = torch.flatten(grid, 1)
        offsets = (flat[:, :, None] - flat[:, None, :]).permute(1, 2, 0).contiguous()
        offsets[:, :, 0] += wh - 1  # offsets from 0
        offsets[:, :, 1] += ww - 1
        offsets[:, :, 0] *= 2 * ww - 1  # row-major index into the table
        self.register_buffer("relative_position_index", offsets.sum(-1))
        self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias)
        self.attn_drop, self.proj, self.proj_drop = (
            nn.Dropout(attn_drop),
            nn.Linear(dim, dim),
            nn.Dropout(proj_drop),
        )
        trunc_normal_(self.relative_position_bias_table, std=0.02)
        self.softmax = nn.Softmax(-1)

    def forward(self, tokens, mask=None):
        n_win_b, n, c = tokens.shape
        q, k, v = (
            self.qkv(tokens)
            .reshape(n_win_b, n, 3, self.num_heads, c // self.num_heads)
            .permute(2, 0, 3, 1, 4)
        )
        q = q * self.scale
        attn = q @ k.transpose(-2, -1)
        area = self.window_size[0] * self.window_size[1]
        bias = self.relative_position_bias_table[self.relative_position_index.view(-1)].view(
            area, area, -1
        )
        attn = attn + bias.permute(2, 0, 1).contiguous().unsqueeze(0)
        if mask is not None:  # shifted windows: -100 between pixels from different regions
            n_win = mask.shape[0]
            attn = attn.view(n_win_b // n_win, n_win, self.num_heads, n, n) + mask.unsqueeze(
                1
            ).unsqueeze(0)
            attn = attn.view(-1, self.num_heads, n, n)
        attn = self.attn_drop(self.softmax(attn))
        return self.proj_drop(self.proj((attn @ v).transpose(1, 2).reshape(n_win_b, n, c)))

    def extra_repr(self):
        return f"{self.dim} channels, {self.num_heads} heads, windows of {self.window_size}"

    def flops(self, n):
        head = self.dim // self.num_heads
        return (
            n * self.dim * 3 * self.dim
            + 2 * self.num_heads * n * n * head
            + n * self.dim * self.dim
        )


class SwinBlock(nn.Module):
    def __init__(
        self,
        dim,
        input_resolution,
        num_heads,
        window_size=7,
        shift_size=0,
        mlp_ratio=4.0,
        drop_path=0.0,
        norm_layer=nn.LayerNorm,
    ):
        super().__init__()
        self.dim, self.input_resolution, self.num_heads = dim, input_resolution, num_heads
        self.window_size, self.shift_size, self.mlp_ratio = window_size, shift_size, mlp_ratio
        if min(input_resolution) <= window_size:  # one window covers the map: nothing to shift
            self.window_size, self.shift_size = min(input_resolution), 0
        assert 0 <= self.shift_size < self.window_size
        self.norm1 = norm_layer(dim)
        self.attn = WindowMSA(dim, pair(self.window_size), num_heads)
        self.drop_path = nn.Identity()  # drop_path_rate is 0 here
        self.norm2 = norm_layer(dim)
        self.mlp = FeedForward(dim, int(dim * mlp_ratio))
        mask = None
        if self.shift_size > 0:
            h, w = input_resolution
            regions = torch.zeros((1, h, w, 1))
            ws, s = self.window_size, self.shift_size
            cuts = (slice(0, -ws), slice(-ws, -s), slice(-s, None))  # 3 x 3 regions
            label = 0
            for rows in cuts:
                for cols in cuts:
                    regions[:, rows, cols, :] = label
                    label += 1
            labels = to_windows(regions, self.window_size).view(
                -1, self.window_size * self.window_size
            )
            mask = labels.unsqueeze(1) - labels.unsqueeze(2)
            mask = mask.masked_fill(mask != 0, float(-100.0)).masked_fill(mask == 0, float(0.0))
        self.register_buffer("attn_mask", mask)  # None in unshifted blocks

    def forward(self, x):
        h, w = self.input_resolution
        b, length, c = x.shape
        assert length == h * w
        ws, shift = self.window_size, self.shift_size
        y = self.norm1(x).view(b, h, w, c)
        if shift > 0:
            y = torch.roll(y, shifts=(-shift, -shift), dims=(1, 2))
        y = self.attn(to_windows(y, ws).view(-1, ws * ws, c), mask=self.attn_mask)
        y = from_windows(y.view(-1, ws, ws, c), ws, h, w)
        if shift > 0:
            y = torch.roll(y, shifts=(shift, shift), dims=(1, 2))
        x = x + self.drop_path(y.view(b, h * w, c))
        return x + self.drop_path(self.mlp(self.norm2(x)))

    def extra_repr(self):
        window = f"window {self.window_size}, shift {self.shift_size}"
        return f"{self.dim} channels at {self.input_resolution}, {self.num_heads} heads, {window}"

    def flops(self):
        h, w = self.input_resolution
        windows = h * w / self.window_size / self.window_size
        return (
            2 * self.dim * h * w
            + windows * self.attn.flops(self.window_size**2)
            + 2 * h * w * self.dim * self.dim * self.mlp_ratio
        )


class Merge2x2(nn.Module):
    # 2x2 neighbours concatenated (4C), normalised, projected to 2C
    def __init__(self, resolution, dim, norm_layer=nn.LayerNorm):
        super().__init__()
        self.resolution, self.dim = resolution, dim
        self.reduction = nn.Linear(dim * 4, dim * 2, bias=False)
        self.norm = norm_layer(dim * 4)

    def forward(self, x):
        h, w = self.resolution
        b, _, c = x.shape
        assert h % 2 == 0 and w % 2 == 0
        x = x.view(b, h, w, c)
        quads = [x[:, 0::2, 0::2, :], x[:, 1::2, 0::2, :], x[:, 0::2, 1::2, :], x[:, 1::2, 1::2, :]]
        return self.reduction(self.norm(torch.cat(quads, -1).view(b, -1, 4 * c)))

    def extra_repr(self):
        return f"{self.dim} channels at {self.resolution}"

    def flops(self):
        h, w = self.resolution
        return h * w * self.dim + (h // 2) * (w // 2) * 4 * self.dim * 2 * self.dim


class Stage(nn.Module):
    def __init__(
        self,
        dim,
        input_resolution,
        depth,
        num_heads,
        window_size,
        mlp_ratio=4.0,
        drop_path=0.0,
        norm_layer=nn.LayerNorm,
        downsample=None,
    ):
        super().__init__()
        self.dim, self.input_resolution, self.depth = dim, input_resolution, depth
        rates = drop_path if isinstance(drop_path, list) else [drop_path] * depth
        # every other block shifts its windows by half a window
        self.blocks = nn.ModuleList(
            [
                SwinBlock(
                    dim,
                    input_resolution,
                    num_heads,
                    window_size,
                    0 if i % 2 == 0 else window_size // 2,
                    mlp_ratio,
                    rates[i],
                    norm_layer,
                )
                for i in range(depth)
            ]
        )
        self.downsample = (
            None
            if downsample is None
            else downsample(input_resolution, dim=dim, norm_layer=norm_layer)
        )

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x if self.downsample is None else self.downsample(x)

    def extra_repr(self):
        return f"{self.depth} blocks of {self.dim} channels at {self.input_resolution}"

    def flops(self):
        total = sum(block.flops() for block in self.blocks)
        return total + (0 if self.downsample is None else self.downsample.flops())


class Patchify(nn.Module):
    def __init__(self, img_size, patch_size, in_chans, embed_dim, norm_layer=None):
        super().__init__()
        self.img_size, self.patch_size = pair(img_size), pair(patch_size)
        self.patches_resolution = [i // p for i, p in zip(self.img_size, self.patch_size)]
        self.num_patches = self.patches_resolution[0] * self.patches_resolution[1]
        self.in_chans, self.embed_dim = in_chans, embed_dim
        self.proj = nn.Conv2d(
            in_chans, embed_dim, kernel_size=self.patch_size, stride=self.patch_size
        )
        self.norm = None if norm_layer is None else norm_layer(embed_dim)

    def forward(self, x):
        assert tuple(x.shape[2:]) == self.img_size
        x = self.proj(x).flatten(2).transpose(1, 2)
        return x if self.norm is None else self.norm(x)

    def flops(self):
        ho, wo = self.patches_resolution
        total = ho * wo * self.embed_dim * self.in_chans * self.patch_size[0] * self.patch_size[1]
        return total + (0 if self.norm is None else ho * wo * self.embed_dim)


class Swin(nn.Module):
    def __init__(
        self,
        img_size=224,
        patch_size=4,
        in_chans=3,
        num_classes=1000,
        embed_dim=96,
        depths=(2, 2, 6, 2),
        num_heads=(3, 6, 12, 24),
        window_size=7,
        mlp_ratio=4.0,
        drop_rate=0.0,
        drop_path_rate=0.1,
        norm_layer=nn.LayerNorm,
        ape=False,
        patch_norm=True,
    ):
        super().__init__()
        self.num_classes, self.num_layers, self.ape = num_classes, len(depths), ape
        self.num_features = embed_dim * 2 ** (len(depths) - 1)
        self.patch_embed = Patchify(
            img_size, patch_size, in_chans, embed_dim, norm_layer if patch_norm else None
        )
        resolution = self.patches_resolution = self.patch_embed.patches_resolution
        if ape:  # off here: the relative bias carries the positions
            self.absolute_pos_embed = nn.Parameter(
                torch.zeros(1, self.patch_embed.num_patches, embed_dim)
            )
            trunc_normal_(self.absolute_pos_embed, std=0.02)
        self.pos_drop = nn.Dropout(drop_rate)
        rates = [
            r.item() for r in torch.linspace(0, drop_path_rate, sum(depths))
        ]  # deeper blocks drop more
        self.layers = nn.ModuleList()
        for i, depth in enumerate(depths):
            scale = 2**i
            self.layers.append(
                Stage(
                    int(embed_dim * scale),
                    (resolution[0] // scale, resolution[1] // scale),
                    depth,
                    num_heads[i],
                    window_size,
                    mlp_ratio,
                    rates[sum(depths[:i]) : sum(depths[: i + 1])],
                    norm_layer,
                    Merge2x2 if i < self.num_layers - 1 else None,
                )
            )
        width = self.num_features
        self.norm = norm_layer(width)
        self.avgpool = nn.AdaptiveAvgPool1d(output_size=1)
        self.head = nn.Linear(width, num_classes) if num_classes else nn.Identity()
        self.apply(self.init_weights)

    @staticmethod
    def init_weights(m):
        if isinstance(m, nn.LayerNorm):
            nn.init.constant_(m.weight, 1)
            nn.init.constant_(m.bias, 0)
        elif isinstance(m, nn.Linear):
            trunc_normal_(m.weight, std=0.02)
            if m.bias is not None:
                nn.init.constant_(m.bias, 0)

    @torch.jit.ignore
    def no_weight_decay(self):
        return {"absolute_pos_embed"}

    @torch.jit.ignore
    def no_decay_keywords(self):
        return {"relative_position_bias_table"}

    def features(self, x):
        x = self.patch_embed(x)
        if self.ape:
            x = self.absolute_pos_embed + x
        x = self.pos_drop(x)
        for stage in self.layers:
            x = stage(x)
        x = self.avgpool(self.norm(x).transpose(1, 2))  # mean over the tokens
        return torch.flatten(x, 1)

    def forward(self, x):
        return self.head(self.features(x))

    def flops(self):
        total = self.patch_embed.flops() + sum(stage.flops() for stage in self.layers)
        tokens = self.patches_resolution[0] * self.patches_resolution[1] // (2**self.num_layers)
        return total + self.num_features * tokens + self.num_features * self.num_classes


def decay_groups(net, skip=(), skip_keywords=()):
    # no weight decay for vectors (biases, norms), nor for the named and keyword-matched tables
    decayed, exempt = [], []
    for name, p in net.named_parameters():
        if not p.requires_grad:
            continue
        if (
            p.ndim == 1
            or name.endswith(".bias")
            or name in skip
            or any(k in name for k in skip_keywords)
        ):
            exempt.append(p)
        else:
            decayed.append(p)
    return [{"params": decayed}, {"params": exempt, "weight_decay": 0.0}]


model = Swin(
    img_size=16,
    patch_size=2,
    num_classes=5,
    embed_dim=8,
    depths=[2, 2],
    num_heads=[2, 4],
    window_size=4,
    drop_path_rate=0.0,
)
initialize(model)
record.append(model.flops())
optimizer = optim.AdamW(
    decay_groups(model, model.no_weight_decay(), model.no_decay_keywords()),
    lr=1e-3,
    betas=(0.9, 0.999),
    eps=1e-8,
    weight_decay=0.05,
)
criterion = nn.CrossEntropyLoss()
for images, labels in data_loader:
    loss = criterion(model(images), labels)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    record.append(loss.item())
"""

SWIN_STEP = [("    loss.backward()\n    optimizer.step()", "    optimizer.step(loss.backward())")]


@pytest.fixture
def float64():
    previous, our_previous = torch.get_default_dtype(), rg.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    rg.set_default_dtype(rg.float64)
    yield
    torch.set_default_dtype(previous)
    rg.set_default_dtype(our_previous)


def test_swin_transformer_matches_torch(float64):
    rng = np.random.default_rng(45)
    images = rng.standard_normal((4, 3, 16, 16))
    labels = rng.integers(0, 5, 4)
    records, state, models = [], {}, []
    for lib in (torch, rg):

        def initialize(model):
            if not state:
                state.update({k: v.detach().numpy().copy() for k, v in model.state_dict().items()})
            else:
                model.load_state_dict({k: rg.tensor(v) for k, v in state.items()})

        torch.manual_seed(0)
        record = []
        data = lib.utils.data
        names = {
            "torch": lib,
            "nn": lib.nn,
            "F": lib.nn.functional,
            "optim": lib.optim,
            "math": math,
            "record": record,
            "initialize": initialize,
            "data_loader": data.DataLoader(
                data.TensorDataset(lib.tensor(images), lib.tensor(labels)), batch_size=2
            ),
        }
        source = SWIN_SOURCE if lib is torch else port(SWIN_SOURCE, SWIN_STEP)
        exec(compile(source, f"<{lib.__name__} swin>", "exec"), names)
        model = names["model"]
        record.append({k: v.detach().numpy().copy() for k, v in model.state_dict().items()})
        records.append(record)
        models.append(model)
    # the buffers: the relative position index, and the shifted blocks' masks (None unshifted)
    assert sorted(records[0][-1]) == sorted(records[1][-1])
    assert models[1].layers[0].blocks[0].attn_mask is None
    assert models[0].layers[0].blocks[1].attn_mask.shape == (4, 16, 16)
    assert repr(models[1]) == repr(models[0])
    assert_records_agree(records[1], records[0], rtol=1e-8, atol=1e-10)
