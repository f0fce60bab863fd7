"""Real ports, continued (the harness: ``tests/real_ports.py``): a program written here in the
style of lucidrains/vit-pytorch, a small vision transformer written with einops, trained under
torch and, ported, under retrograd from the same weights.

What it exercises: a patch embedding ``nn.Sequential`` opening with einops'
``Rearrange('b c (h p1) (w p2) -> b (h w) (p1 p2 c)', p1=, p2=)`` layer; heads split by
``map(lambda t: rearrange(t, 'b n (h d) -> b h n d', h=...), qkv)`` of ``.chunk(3, dim=-1)``
and merged by ``rearrange(out, 'b h n d -> b n (h d)')``; a class token by
``repeat(cls, '1 1 d -> b 1 d', b=b)``; positions added in place (``x += pos[:, : n + 1]``);
``nn.Softmax(dim=-1)``, ``nn.Identity``, ``nn.GELU``, ``nn.ModuleList`` of
``nn.ModuleList``s, ``nn.Dropout(0.0)``, parameters from ``torch.randn``; pooling by the class
token or the mean; Adam with ``CosineAnnealingLR(T_max=)`` and ``clip_grad_norm_``; eval
``softmax(dim=-1)`` under ``torch.no_grad``.

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

from einops import repeat, rearrange
from einops.layers.torch import Rearrange  # a layer: it can open an nn.Sequential


def as_pair(size):
    return size if isinstance(size, tuple) else (size, size)


class MultiHeadSelfAttention(nn.Module):
    def __init__(self, width, n_heads, head_width, p=0.0):
        super().__init__()
        inner = n_heads * head_width
        self.n_heads, self.scale = n_heads, head_width**-0.5
        self.pre_norm = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * inner, bias=False)
        self.softmax = nn.Softmax(dim=-1)
        self.drop = nn.Dropout(p)
        # a single head as wide as the model needs no output projection
        needs_proj = n_heads > 1 or head_width != width
        proj = nn.Sequential(nn.Linear(inner, width), nn.Dropout(p))
        self.proj = proj if needs_proj else nn.Identity()

    def forward(self, tokens):
        parts = self.qkv(self.pre_norm(tokens)).chunk(3, dim=-1)
        q, k, v = map(lambda t: rearrange(t, "b n (h d) -> b h n d", h=self.n_heads), parts)
        weights = self.drop(self.softmax(torch.matmul(q, k.transpose(-1, -2)) * self.scale))
        mixed = rearrange(torch.matmul(weights, v), "b h n d -> b n (h d)")
        return self.proj(mixed)


def mlp(width, hidden, p=0.0):
    return nn.Sequential(
        nn.LayerNorm(width), nn.Linear(width, hidden), nn.GELU(), nn.Dropout(p),
        nn.Linear(hidden, width), nn.Dropout(p),
    )


class TinyViT(nn.Module):
    def __init__(self, *, image, patch, classes, width, depth, n_heads, head_width, hidden,
                 pool="cls", in_ch=3, p=0.0):
        super().__init__()
        (ih, iw), (ph, pw) = as_pair(image), as_pair(patch)
        assert ih % ph == 0 and iw % pw == 0, "the patch size must divide the image size"
        assert pool in ("cls", "mean")
        n_patches, flat = (ih // ph) * (iw // pw), in_ch * ph * pw
        self.embed = nn.Sequential(
            Rearrange("b c (h p1) (w p2) -> b (h w) (p1 p2 c)", p1=ph, p2=pw),
            nn.LayerNorm(flat), nn.Linear(flat, width), nn.LayerNorm(width),
        )
        self.cls = nn.Parameter(torch.randn(1, 1, width))
        self.pos = nn.Parameter(torch.randn(1, n_patches + 1, width))
        self.emb_drop = nn.Dropout(p)
        self.blocks = nn.ModuleList([])
        for _ in range(depth):
            attend = MultiHeadSelfAttention(width, n_heads, head_width, p)
            self.blocks.append(nn.ModuleList([attend, mlp(width, hidden, p)]))
        self.final_norm = nn.LayerNorm(width)
        self.pool, self.latent = pool, nn.Identity()
        self.classify = nn.Linear(width, classes)

    def forward(self, images):
        x = self.embed(images)
        b, n, _ = x.shape
        x = torch.cat((repeat(self.cls, "1 1 d -> b 1 d", b=b), x), dim=1)
        x += self.pos[:, : n + 1]
        x = self.emb_drop(x)
        for attend, feed in self.blocks:
            x = x + attend(x)
            x = x + feed(x)
        x = self.final_norm(x)
        pooled = x[:, 0] if self.pool == "cls" else x.mean(dim=1)
        return self.classify(self.latent(pooled))


vit = TinyViT(image=8, patch=4, classes=4, width=16, depth=2, n_heads=2, head_width=8,
              hidden=32, pool=pool)
initialize(vit)
opt = torch.optim.Adam(vit.parameters(), lr=3e-3)
sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=len(batches))
for pixels, targets in batches:
    loss = torch.nn.functional.cross_entropy(vit(torch.tensor(pixels)), torch.tensor(targets))
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(vit.parameters(), 1.0)
    opt.step()
    sched.step()
    record.append(loss.item())
    record.append(params_of(vit))
vit.eval()
with torch.no_grad():
    record.append(vit(torch.tensor(batches[-1][0])).softmax(dim=-1).numpy())
"""

VIT_STEPS = [
    (
        "import torch\nfrom torch import nn\n",
        "import retrograd as torch\nfrom retrograd import nn\n",
    ),
    ("from einops.layers.torch import Rearrange", "from einops.layers.retrograd import Rearrange"),
    (
        "    loss.backward()\n    torch.nn.utils.clip_grad_norm_(vit.parameters(), 1.0)\n"
        "    opt.step()\n",
        "    grads = loss.backward()\n"
        "    torch.nn.utils.clip_grad_norm_(grads, vit.parameters(), 1.0)\n"
        "    opt.step(grads)\n",
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
        (rng.standard_normal((3, 3, 8, 8)).astype(np.float32), rng.integers(0, 4, 3))
        for _ in range(3)
    ]
    (theirs, ours), logs = runs_with_draws(
        VIT_SOURCE,
        VIT_STEPS if layers == "retrograd" else VIT_STEPS_KEEPING_TORCH_LAYERS, capsys, 3010,
        pool=pool, batches=batches, initialize=initializer(), params_of=params_of,
    )  # fmt: skip
    assert logs[0] == logs[1]
    assert len(theirs) == 2 * len(batches) + 1
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
