"""Real ports, continued (the harness: ``tests/real_ports.py``): a program written here in the
style of nanoGPT's ``train.py`` loop over its ``model.py``, one process, small, run under
torch and, ported, under retrograd from the same weights and draws.

Its surface: a ``nullcontext``/``torch.amp.autocast`` context,
``torch.cuda.amp.GradScaler(enabled=(dtype == "float16"))``, batches drawn by
``torch.randint(high, size)`` whose 0-d entries slice a NumPy array for
``torch.from_numpy(...astype(np.int64))`` and ``torch.stack``, a loss estimate under
``@torch.no_grad()`` writing ``losses[k] = loss.item()`` into ``torch.zeros`` and comparing the
mean with a float, a warmup + cosine learning rate written into every ``param_group["lr"]``,
gradient accumulation over micro-steps (``loss / micro_steps``), ``scaler.unscale_`` before
``clip_grad_norm_``, ``scaler.step``/``update``, ``zero_grad(set_to_none=True)``; the model
with weight tying, ``F.scaled_dot_product_attention(is_causal=True)``, a hand-written layer
norm over ``F.layer_norm`` with an optional bias, and an optimizer configuration reading
``inspect.signature(torch.optim.AdamW)`` for ``fused``.

The port changes the gradient lines only: each micro-step's gradients are summed
(``grads = micro if step == 0 else grads + micro``), where torch sums them into ``.grad``.
"""

from __future__ import annotations

import types

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import assert_records_agree, both

NANOGPT_SOURCE = """
import inspect
import time
import contextlib

class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        assert cfg.width % cfg.heads == 0
        self.heads, self.width, self.p = cfg.heads, cfg.width, cfg.dropout
        self.qkv = nn.Linear(cfg.width, 3 * cfg.width, bias=cfg.bias)
        self.c_proj = nn.Linear(cfg.width, cfg.width, bias=cfg.bias)
        self.drop = nn.Dropout(cfg.dropout)
        assert hasattr(torch.nn.functional, "scaled_dot_product_attention")

    def forward(self, x):
        B, T, C = x.size()
        parts = self.qkv(x).split(self.width, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in parts)
        p = self.p if self.training else 0
        mixed = F.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=p, is_causal=True)
        return self.drop(self.c_proj(mixed.transpose(1, 2).contiguous().view(B, T, C)))

class Norm(nn.Module):
    # layer norm whose bias can be switched off
    def __init__(self, width, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.bias = nn.Parameter(torch.zeros(width)) if bias else None

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)

class Layer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.norm_a, self.norm_b = Norm(cfg.width, cfg.bias), Norm(cfg.width, cfg.bias)
        self.attn = Attention(cfg)
        self.ff = nn.Sequential(
            nn.Linear(cfg.width, 4 * cfg.width, bias=cfg.bias), nn.GELU(),
            nn.Linear(4 * cfg.width, cfg.width, bias=cfg.bias), nn.Dropout(cfg.dropout),
        )

    def forward(self, x):
        x = x + self.attn(self.norm_a(x))
        return x + self.ff(self.norm_b(x))

class MiniGPT(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.tok = nn.Embedding(cfg.vocab, cfg.width)
        self.pos = nn.Embedding(cfg.block, cfg.width)
        self.drop = nn.Dropout(cfg.dropout)
        self.layers = nn.ModuleList([Layer(cfg) for _ in range(cfg.depth)])
        self.norm = Norm(cfg.width, cfg.bias)
        self.head = nn.Linear(cfg.width, cfg.vocab, bias=False)
        self.tok.weight = self.head.weight  # tied: one matrix embeds and un-embeds
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                torch.nn.init.normal_(m.weight, mean=0.0, std=0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                torch.nn.init.zeros_(m.bias)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight") or name.endswith("ff.2.weight"):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg.depth))

    def forward(self, idx, y=None):
        where = torch.arange(0, idx.size(1), dtype=torch.long, device=idx.device)
        x = self.drop(self.tok(idx) + self.pos(where))
        for layer in self.layers:
            x = layer(x)
        x = self.norm(x)
        if y is None:
            return self.head(x[:, [-1], :]), None  # only the last position is needed
        logits = self.head(x)
        flat = logits.view(-1, logits.size(-1))
        return logits, F.cross_entropy(flat, y.view(-1), ignore_index=-1)

    def optimizer(self, decay, lr, betas, device_type):
        trainable = [p for p in self.parameters() if p.requires_grad]
        groups = [
            {"params": [p for p in trainable if p.dim() >= 2], "weight_decay": decay},
            {"params": [p for p in trainable if p.dim() < 2], "weight_decay": 0.0},
        ]
        can_fuse = "fused" in inspect.signature(torch.optim.AdamW).parameters
        extra = dict(fused=True) if can_fuse and device_type == "cuda" else {}
        return torch.optim.AdamW(groups, lr=lr, betas=betas, **extra)

def train(cfg, train_tokens, val_tokens, dtype, state=None, iters=4):
    micro_steps, batch, peak_lr, floor_lr, warmup, decay_until = 2, 3, 6e-3, 6e-4, 2, 4
    device = "cpu"
    device_type = "cuda" if "cuda" in device else "cpu"
    amp_dtype = getattr(torch, dtype)
    if device_type == "cpu":
        ctx = contextlib.nullcontext()
    else:
        ctx = torch.amp.autocast(device_type=device_type, dtype=amp_dtype)

    def draw(split):
        tokens = train_tokens if split == "train" else val_tokens
        starts = torch.randint(len(tokens) - cfg.block, (batch,))
        def window(s, shift):
            return torch.from_numpy(tokens[s + shift:s + shift + cfg.block].astype(np.int64))
        x = torch.stack([window(s, 0) for s in starts])
        y = torch.stack([window(s, 1) for s in starts])  # the next token at every position
        return x.to(device), y.to(device)

    model = MiniGPT(cfg)
    if state is not None:
        model.load_state_dict(state)
    start = {k: v.numpy().copy() for k, v in model.state_dict().items()}
    model.to(device)
    scaler = torch.cuda.amp.GradScaler(enabled=(dtype == "float16"))
    opt = model.optimizer(0.1, peak_lr, (0.9, 0.95), device_type)

    @torch.no_grad()
    def estimate(n=2):
        model.eval()
        means = {}
        for split in ("train", "val"):
            losses = torch.zeros(n)
            for k in range(n):
                with ctx:
                    _, loss = model(*draw(split))
                losses[k] = loss.item()
            means[split] = losses.mean()
        model.train()
        return means

    def rate(it):
        if it < warmup:
            return peak_lr * (it + 1) / (warmup + 1)
        if it > decay_until:
            return floor_lr
        progress = (it - warmup) / (decay_until - warmup)
        return floor_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (peak_lr - floor_lr)

    log, best, started = [], 1e9, time.time()
    x, y = draw("train")
    for it in range(iters + 1):
        lr = rate(it)
        for group in opt.param_groups:
            group["lr"] = lr
        if it % 2 == 0:
            means = estimate()
            log.append([means["train"].item(), means["val"].item()])
            if means["val"] < best:
                best = means["val"]
        for step in range(micro_steps):
            with ctx:
                _, loss = model(x, y)
                loss = loss / micro_steps  # the accumulated gradient is the mean over micro-batches
            x, y = draw("train")  # the next batch, drawn while this one's backward runs
            scaler.scale(loss).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        log.append([loss.item() * micro_steps, lr, float(best)])
        log.append({n: p.detach().numpy().copy() for n, p in model.named_parameters()})
    return start, log
"""

NANOGPT_STEP = [
    (
        "            scaler.scale(loss).backward()\n"
        "        scaler.unscale_(opt)\n"
        "        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n"
        "        scaler.step(opt)",
        "            micro = scaler.scale(loss).backward()\n"
        "            grads = micro if step == 0 else grads + micro\n"
        "        scaler.unscale_(opt, grads)\n"
        "        torch.nn.utils.clip_grad_norm_(grads, model.parameters(), 1.0)\n"
        "        scaler.step(opt, grads)",
    )
]


def shared_randint(monkeypatch, lib, seed):
    """``randint`` (both of torch's forms) drawing from one seeded stream."""
    rng = np.random.default_rng(seed)

    def randint(*args, generator=None, **_):
        low, high, size = (0, *args) if len(args) == 2 else args
        return lib.tensor(rng.integers(low, high, tuple(size)), dtype=lib.int64)

    monkeypatch.setattr(lib, "randint", randint)


@pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_nanogpt_style_loop_with_accumulation_and_grad_scaler_matches_torch(monkeypatch, dtype):
    rng = np.random.default_rng(0)
    train_tokens = rng.integers(0, 11, 120).astype(np.uint16)
    val_tokens = rng.integers(0, 11, 40).astype(np.uint16)
    theirs, ours = both(NANOGPT_SOURCE, NANOGPT_STEP)
    records, initial = [], None
    for lib, names in ((torch, theirs), (rg, ours)):
        cfg = types.SimpleNamespace(
            block=6, vocab=11, depth=2, heads=2, width=8, dropout=0.0, bias=True
        )
        with monkeypatch.context() as patch:
            shared_randint(patch, lib, 2)
            torch.manual_seed(0)
            initial, out = names["train"](cfg, train_tokens, val_tokens, dtype, initial)
        for record in out:
            if isinstance(record, dict):  # the key bias: a true gradient of zero, AdamW's
                for name in record:  # first steps follow float32 rounding
                    if name.endswith("attn.qkv.bias"):
                        record[name][8:16] = 0.0
        records.append(out)
    assert_records_agree(records[1], records[0], rtol=1e-5, atol=1e-6)
