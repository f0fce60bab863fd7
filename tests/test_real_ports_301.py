# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
a vision transformer written with einops.

- lucidrains/vit-pytorch's ``ViT`` (``vit_pytorch/vit.py``: ``pair``, ``FeedForward``,
  ``Attention``, ``Transformer``, ``ViT``), as written: the patch embedding is an
  ``nn.Sequential`` starting with einops' ``Rearrange('b c (h p1) (w p2) -> b (h w) (p1 p2
  c)', ...)`` layer, the heads are split by ``map(lambda t: rearrange(t, 'b n (h d) -> b h n
  d', h = self.heads), qkv)`` of ``.chunk(3, dim = -1)`` and merged by ``rearrange(out, 'b h
  n d -> b n (h d)')``, the class token is ``repeat(self.cls_token, '1 1 d -> b 1 d', b =
  b)``, the positions are added in place (``x += self.pos_embedding[:, :(n + 1)]``); pooled
  by the class token or the mean (``pool``), trained by the README's loop (Adam,
  ``F.cross_entropy``) on drawn images, with a cosine schedule and ``clip_grad_norm_``.

The lines changed: the imports (``torch`` is retrograd; einops' layer comes from
``einops.layers.retrograd``, einops' name for retrograd's layers; or, in the ``torch_layers_kept``
run, ``from einops.layers.torch import Rearrange`` stays and the ``nn.Sequential`` owns
retrograd's layer made from torch's) and the gradient lines.
``from einops import rearrange, repeat`` is unchanged: einops takes retrograd tensors. The
weights are torch's (``initialize``); dropout is 0 (each library draws its own masks).
"""

from __future__ import annotations

import numpy as np
import pytest

from real_ports import assert_records_agree, initializer, params_of, runs_with_draws

pytest.importorskip("einops", minversion="0.8")

VIT_SOURCE = """
import torch
from torch import nn

from einops import rearrange, repeat
from einops.layers.torch import Rearrange

# helpers

def pair(t):
    return t if isinstance(t, tuple) else (t, t)

# classes

class FeedForward(nn.Module):
    def __init__(self, dim, hidden_dim, dropout = 0.):
        super().__init__()
        self.net = nn.Sequential(
            nn.LayerNorm(dim),
            nn.Linear(dim, hidden_dim),
            nn.GELU(),
            nn.Dropout(dropout),
            nn.Linear(hidden_dim, dim),
            nn.Dropout(dropout)
        )

    def forward(self, x):
        return self.net(x)

class Attention(nn.Module):
    def __init__(self, dim, heads = 8, dim_head = 64, dropout = 0.):
        super().__init__()
        inner_dim = dim_head *  heads
        project_out = not (heads == 1 and dim_head == dim)

        self.heads = heads
        self.scale = dim_head ** -0.5

        self.norm = nn.LayerNorm(dim)

        self.attend = nn.Softmax(dim = -1)
        self.dropout = nn.Dropout(dropout)

        self.to_qkv = nn.Linear(dim, inner_dim * 3, bias = False)

        self.to_out = nn.Sequential(
            nn.Linear(inner_dim, dim),
            nn.Dropout(dropout)
        ) if project_out else nn.Identity()

    def forward(self, x):
        x = self.norm(x)

        qkv = self.to_qkv(x).chunk(3, dim = -1)
        q, k, v = map(lambda t: rearrange(t, 'b n (h d) -> b h n d', h = self.heads), qkv)

        dots = torch.matmul(q, k.transpose(-1, -2)) * self.scale

        attn = self.attend(dots)
        attn = self.dropout(attn)

        out = torch.matmul(attn, v)
        out = rearrange(out, 'b h n d -> b n (h d)')
        return self.to_out(out)

class Transformer(nn.Module):
    def __init__(self, dim, depth, heads, dim_head, mlp_dim, dropout = 0.):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.layers = nn.ModuleList([])
        for _ in range(depth):
            self.layers.append(nn.ModuleList([
                Attention(dim, heads = heads, dim_head = dim_head, dropout = dropout),
                FeedForward(dim, mlp_dim, dropout = dropout)
            ]))

    def forward(self, x):
        for attn, ff in self.layers:
            x = attn(x) + x
            x = ff(x) + x

        return self.norm(x)

class ViT(nn.Module):
    def __init__(self, *, image_size, patch_size, num_classes, dim, depth, heads, mlp_dim, pool = 'cls', channels = 3, dim_head = 64, dropout = 0., emb_dropout = 0.):
        super().__init__()
        image_height, image_width = pair(image_size)
        patch_height, patch_width = pair(patch_size)

        assert image_height % patch_height == 0 and image_width % patch_width == 0, 'Image dimensions must be divisible by the patch size.'

        num_patches = (image_height // patch_height) * (image_width // patch_width)
        patch_dim = channels * patch_height * patch_width
        assert pool in {'cls', 'mean'}, 'pool type must be either cls (cls token) or mean (mean pooling)'

        self.to_patch_embedding = nn.Sequential(
            Rearrange('b c (h p1) (w p2) -> b (h w) (p1 p2 c)', p1 = patch_height, p2 = patch_width),
            nn.LayerNorm(patch_dim),
            nn.Linear(patch_dim, dim),
            nn.LayerNorm(dim),
        )

        self.pos_embedding = nn.Parameter(torch.randn(1, num_patches + 1, dim))
        self.cls_token = nn.Parameter(torch.randn(1, 1, dim))
        self.dropout = nn.Dropout(emb_dropout)

        self.transformer = Transformer(dim, depth, heads, dim_head, mlp_dim, dropout)

        self.pool = pool
        self.to_latent = nn.Identity()

        self.mlp_head = nn.Linear(dim, num_classes)

    def forward(self, img):
        x = self.to_patch_embedding(img)
        b, n, _ = x.shape

        cls_tokens = repeat(self.cls_token, '1 1 d -> b 1 d', b = b)
        x = torch.cat((cls_tokens, x), dim=1)
        x += self.pos_embedding[:, :(n + 1)]
        x = self.dropout(x)

        x = self.transformer(x)

        x = x.mean(dim = 1) if self.pool == 'mean' else x[:, 0]

        x = self.to_latent(x)
        return self.mlp_head(x)


# the README's model, small, and a training loop over the drawn batches
v = ViT(
    image_size = 16,
    patch_size = 4,
    num_classes = 5,
    dim = 32,
    depth = 2,
    heads = 4,
    mlp_dim = 64,
    pool = pool,
    channels = 3,
    dim_head = 8,
    dropout = 0.,
    emb_dropout = 0.
)
initialize(v)
opt = torch.optim.Adam(v.parameters(), lr = 3e-3)
scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max = len(batches))
for images, labels in batches:
    img = torch.tensor(images)
    preds = v(img) # (batch, num_classes)
    loss = torch.nn.functional.cross_entropy(preds, torch.tensor(labels))
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(v.parameters(), 1.0)
    opt.step()
    scheduler.step()
    record.append(loss.item())
    record.append(params_of(v))
v.eval()
with torch.no_grad():
    record.append(v(torch.tensor(batches[0][0])).softmax(dim = -1).numpy())
"""

VIT_STEPS = [
    (
        "import torch\nfrom torch import nn\n",
        "import retrograd as torch\nfrom retrograd import nn\n",
    ),
    ("from einops.layers.torch import Rearrange", "from einops.layers.retrograd import Rearrange"),
    (
        "    loss.backward()\n    torch.nn.utils.clip_grad_norm_(v.parameters(), 1.0)\n    opt.step()\n",
        "    grads = loss.backward()\n    torch.nn.utils.clip_grad_norm_(grads, v.parameters(), 1.0)\n    opt.step(grads)\n",
    ),
]


#: The port that keeps ``from einops.layers.torch import Rearrange`` (the layers are torch
#: modules): retrograd's modules own retrograd's layer made from each one they are given.
VIT_STEPS_KEEPING_TORCH_LAYERS = [step for step in VIT_STEPS if "einops" not in step[0]]


@pytest.mark.parametrize(
    ("pool", "layers"),
    [("cls", "retrograd"), ("mean", "retrograd"), ("cls", "torch")],
    ids=["cls", "mean", "cls-torch_layers_kept"],
)
def test_vit_trains_as_torch(capsys, pool, layers):
    rng = np.random.default_rng(301)
    batches = [
        (rng.standard_normal((4, 3, 16, 16)).astype(np.float32), rng.integers(0, 5, 4))
        for _ in range(4)
    ]
    (theirs, ours), logs = runs_with_draws(
        VIT_SOURCE, VIT_STEPS if layers == "retrograd" else VIT_STEPS_KEEPING_TORCH_LAYERS, capsys, 3010,
        pool=pool, batches=batches, initialize=initializer(), params_of=params_of,
    )  # fmt: skip
    assert logs[0] == logs[1]
    assert len(theirs) == 2 * len(batches) + 1
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
