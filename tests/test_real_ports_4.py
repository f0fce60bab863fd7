# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):

- a ViT as its authors write one (timm/DeiT style): a ``Conv2d`` patch embedding with
  ``flatten(2).transpose(1, 2)``, a zero ``cls_token`` parameter expanded and concatenated,
  a learned positional embedding, ``trunc_normal_`` and an ``_init_weights`` applied over the
  modules (``xavier_uniform_`` of the conv weight's ``.data`` viewed 2-d), then either
  ``nn.TransformerEncoder`` of ``TransformerEncoderLayer(activation="gelu", batch_first=True,
  norm_first=True)`` or pre-norm blocks around ``nn.MultiheadAttention(batch_first=True)``
  (``need_weights=False``); ``@torch.jit.ignore`` on ``no_weight_decay``, parameter groups
  by ``param.ndim``, AdamW, a ``LambdaLR`` warmup + cosine, ``CrossEntropyLoss(label_smoothing)``,
  ``clip_grad_norm_``, ``torch.max(outputs.data, 1)`` accuracy;
- a training script: a ``Dataset`` of dict samples with a ``collate_fn``, a ``TensorDataset``,
  ``DataLoader(drop_last=True)``, a ``Sequential`` MLP with ``BatchNorm1d`` and ``Dropout``
  toggled by ``train()``/``eval()``, an init loop over ``self.modules()``
  (``kaiming_normal_(mode="fan_out")``, ``ones_``/``zeros_``), SGD (nesterov, weight decay) or
  AdamW under ``OneCycleLR`` (per batch, cycling momentum or betas),
  ``CosineAnnealingWarmRestarts`` stepped with fractional epochs, ``ReduceLROnPlateau`` on the
  validation loss, ``SequentialLR`` of ``LinearLR`` and ``CosineAnnealingLR``, ``MultiStepLR``;
  ``@torch.no_grad()`` evaluation; and a checkpoint (model, optimizer and scheduler state
  dicts) written by ``torch.save`` after the second epoch, loaded by ``torch.load`` into new
  objects and trained on: the resumed run equals the uninterrupted one bit for bit, in both
  libraries, and retrograd's equals torch's.

Dropout masks come from one seeded stream for both libraries (:func:`shared_dropout`).

The defect found: ``default_collate`` gave a field of strings as a list where torch keeps the
tuple ``zip`` made (``[tensor([0, 1]), ('a', 'b')]``).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import assert_records_agree, both, state_of

# -- a ViT -----------------------------------------------------------------------------------------
VIT_SOURCE = """
class PatchEmbed(nn.Module):
    def __init__(self, img_size=16, patch_size=4, in_chans=3, embed_dim=32):
        super().__init__()
        self.num_patches = (img_size // patch_size) ** 2
        self.proj = nn.Conv2d(in_chans, embed_dim, kernel_size=patch_size, stride=patch_size)
    def forward(self, x):
        x = self.proj(x).flatten(2).transpose(1, 2)  # B, N, C
        return x

class ViT(nn.Module):
    def __init__(self, img_size=16, patch_size=4, in_chans=3, num_classes=5, embed_dim=32, depth=2, num_heads=4, mlp_ratio=4.0, dropout=0.1, use_mha=False):
        super().__init__()
        self.patch_embed = PatchEmbed(img_size, patch_size, in_chans, embed_dim)
        num_patches = self.patch_embed.num_patches
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, num_patches + 1, embed_dim))
        self.pos_drop = nn.Dropout(p=dropout)
        self.use_mha = use_mha
        if use_mha:
            self.norms1 = nn.ModuleList([nn.LayerNorm(embed_dim, eps=1e-6) for _ in range(depth)])
            self.attns = nn.ModuleList([nn.MultiheadAttention(embed_dim, num_heads, dropout=0.0, batch_first=True) for _ in range(depth)])
            self.norms2 = nn.ModuleList([nn.LayerNorm(embed_dim, eps=1e-6) for _ in range(depth)])
            self.mlps = nn.ModuleList([nn.Sequential(nn.Linear(embed_dim, int(embed_dim * mlp_ratio)), nn.GELU(), nn.Dropout(dropout), nn.Linear(int(embed_dim * mlp_ratio), embed_dim), nn.Dropout(dropout)) for _ in range(depth)])
        else:
            encoder_layer = nn.TransformerEncoderLayer(d_model=embed_dim, nhead=num_heads, dim_feedforward=int(embed_dim * mlp_ratio),
                                                       dropout=dropout, activation="gelu", batch_first=True, norm_first=True)
            self.encoder = nn.TransformerEncoder(encoder_layer, num_layers=depth, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(embed_dim)
        self.head = nn.Linear(embed_dim, num_classes) if num_classes > 0 else nn.Identity()
        nn.init.trunc_normal_(self.pos_embed, std=.02)
        nn.init.trunc_normal_(self.cls_token, std=.02)
        self.apply(self._init_weights)

    def _init_weights(self, m):
        if isinstance(m, nn.Linear):
            nn.init.trunc_normal_(m.weight, std=.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.constant_(m.bias, 0)
        elif isinstance(m, nn.LayerNorm):
            nn.init.constant_(m.bias, 0)
            nn.init.constant_(m.weight, 1.0)
        elif isinstance(m, nn.Conv2d):
            w = m.weight.data
            torch.nn.init.xavier_uniform_(w.view([w.shape[0], -1]))

    @torch.jit.ignore
    def no_weight_decay(self):
        return {'pos_embed', 'cls_token'}

    def forward_features(self, x):
        B = x.shape[0]
        x = self.patch_embed(x)
        cls_tokens = self.cls_token.expand(B, -1, -1)
        x = torch.cat((cls_tokens, x), dim=1)
        x = x + self.pos_embed
        x = self.pos_drop(x)
        if self.use_mha:
            for norm1, attn, norm2, mlp in zip(self.norms1, self.attns, self.norms2, self.mlps):
                h = norm1(x)
                x = x + attn(h, h, h, need_weights=False)[0]
                x = x + mlp(norm2(x))
        else:
            x = self.encoder(x)
        x = self.norm(x)
        return x[:, 0]

    def forward(self, x):
        x = self.forward_features(x)
        x = self.head(x)
        return x

def param_groups_weight_decay(model, weight_decay=1e-5, no_weight_decay_list=()):
    no_weight_decay_list = set(no_weight_decay_list)
    decay = []
    no_decay = []
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        if param.ndim <= 1 or name.endswith(".bias") or name in no_weight_decay_list:
            no_decay.append(param)
        else:
            decay.append(param)
    return [
        {'params': no_decay, 'weight_decay': 0.},
        {'params': decay, 'weight_decay': weight_decay}]

def train(model, batches, epochs=2):
    params = param_groups_weight_decay(model, 0.05, model.no_weight_decay())
    optimizer = torch.optim.AdamW(params, lr=1e-3, betas=(0.9, 0.999))
    steps = epochs * len(batches)
    warmup = 2
    def lr_lambda(step):
        if step < warmup:
            return float(step + 1) / warmup
        progress = (step - warmup) / max(1, steps - warmup)
        return 0.5 * (1.0 + math.cos(math.pi * progress))
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda)
    criterion = nn.CrossEntropyLoss(label_smoothing=0.1)
    records = []
    for epoch in range(epochs):
        model.train()
        for images, labels in batches:
            outputs = model(images)
            loss = criterion(outputs, labels)
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
            optimizer.step()
            scheduler.step()
            records.append([loss.item(), scheduler.get_last_lr()[0]])
        model.eval()
        correct = 0
        total = 0
        with torch.no_grad():
            for images, labels in batches:
                outputs = model(images)
                _, predicted = torch.max(outputs.data, 1)
                total += labels.size(0)
                correct += (predicted == labels).sum().item()
        records.append(100 * correct / total)
        records.append({n: p.detach().numpy().copy() for n, p in model.named_parameters()})
    return records
"""

VIT_STEP = [
    (
        "            loss.backward()\n            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)\n            optimizer.step()",
        "            grads = loss.backward()\n            torch.nn.utils.clip_grad_norm_(grads, model.parameters(), max_norm=1.0)\n            optimizer.step(grads)",
    )
]


def _images(lib):
    rng = np.random.default_rng(0)
    return [
        (lib.tensor(rng.standard_normal((4, 3, 16, 16))), lib.tensor(rng.integers(0, 5, 4)))
        for _ in range(2)
    ]


@pytest.mark.parametrize("blocks", ["TransformerEncoderLayer", "MultiheadAttention"])
def test_vit_training_matches_torch(blocks):
    theirs, ours = both(VIT_SOURCE, VIT_STEP)
    use_mha = blocks == "MultiheadAttention"
    torch.manual_seed(0)
    reference = theirs["ViT"](dropout=0.0, use_mha=use_mha).double()
    model = ours["ViT"](dropout=0.0, use_mha=use_mha).double()
    model.load_state_dict(state_of(reference))
    expected = theirs["train"](reference, _images(torch))
    got = ours["train"](model, _images(rg))
    assert_records_agree(got, expected, rtol=1e-9, atol=1e-11)


# -- a training script: schedulers, train/eval, a checkpoint in the middle -------------------------
SCRIPT_SOURCE = """
import os
from torch.utils.data import Dataset, DataLoader, TensorDataset, random_split

class TableDataset(Dataset):
    def __init__(self, X, y):
        self.X = torch.tensor(X, dtype=torch.float32)
        self.y = torch.tensor(y, dtype=torch.long)
    def __len__(self):
        return len(self.X)
    def __getitem__(self, idx):
        return {"x": self.X[idx], "y": self.y[idx]}

def collate_fn(batch):
    xs = torch.stack([b["x"] for b in batch])
    ys = torch.tensor([b["y"] for b in batch])
    return xs, ys

class Net(nn.Module):
    def __init__(self, in_features=8, hidden=32, num_classes=3, p=0.3):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(in_features, hidden, bias=False),
            nn.BatchNorm1d(hidden),
            nn.ReLU(),
            nn.Dropout(p),
            nn.Linear(hidden, hidden, bias=False),
            nn.BatchNorm1d(hidden),
            nn.ReLU(),
            nn.Dropout(p),
            nn.Linear(hidden, num_classes),
        )
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.BatchNorm1d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
    def forward(self, x):
        return self.net(x)

def make_scheduler(kind, optimizer, steps_per_epoch, epochs):
    if kind == "onecycle":
        return torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.05, steps_per_epoch=steps_per_epoch, epochs=epochs)
    if kind == "warm_restarts":
        return torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(optimizer, T_0=2, T_mult=2, eta_min=1e-4)
    if kind == "plateau":
        return torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode="min", factor=0.5, patience=0, threshold=1e-1)
    if kind == "sequential":
        warmup = torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=0.1, total_iters=2)
        cosine = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=epochs - 2, eta_min=1e-4)
        return torch.optim.lr_scheduler.SequentialLR(optimizer, schedulers=[warmup, cosine], milestones=[2])
    if kind == "multistep":
        return torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=[1, 3], gamma=0.1)

def make_optimizer(name, model):
    if name == "sgd":
        return torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=5e-4)
    return torch.optim.AdamW(model.parameters(), lr=0.01, weight_decay=1e-2)

def train_one_epoch(model, loader, optimizer, scheduler, criterion, epoch, kind):
    model.train()
    running_loss = 0.0
    iters = len(loader)
    for i, (inputs, targets) in enumerate(loader):
        optimizer.zero_grad()
        outputs = model(inputs)
        loss = criterion(outputs, targets)
        loss.backward()
        optimizer.step()
        if kind == "onecycle":
            scheduler.step()
        elif kind == "warm_restarts":
            scheduler.step(epoch + i / iters)
        running_loss += loss.item() * inputs.size(0)
    return running_loss / len(loader.dataset)

@torch.no_grad()
def evaluate(model, loader, criterion):
    model.eval()
    total, correct, loss_sum = 0, 0, 0.0
    for inputs, targets in loader:
        outputs = model(inputs)
        loss_sum += criterion(outputs, targets).item() * inputs.size(0)
        correct += (outputs.argmax(dim=1) == targets).sum().item()
        total += targets.size(0)
    return loss_sum / total, correct / total

def fit(X, y, Xv, yv, kind, opt_name, epochs, path, state=None, stop_after=None, resume=False):
    train_set = TableDataset(X, y)
    val_set = TensorDataset(torch.tensor(Xv, dtype=torch.float32), torch.tensor(yv))
    train_loader = DataLoader(train_set, batch_size=8, shuffle=False, collate_fn=collate_fn, drop_last=True)
    val_loader = DataLoader(val_set, batch_size=16)
    model = Net()
    if state is not None:
        model.load_state_dict({k: torch.tensor(v) for k, v in state.items()})
    criterion = nn.CrossEntropyLoss()
    optimizer = make_optimizer(opt_name, model)
    scheduler = make_scheduler(kind, optimizer, len(train_loader), epochs)
    start_epoch = 0
    if resume:
        checkpoint = torch.load(path, weights_only=False)
        model.load_state_dict(checkpoint["model_state_dict"])
        optimizer.load_state_dict(checkpoint["optimizer_state_dict"])
        scheduler.load_state_dict(checkpoint["scheduler_state_dict"])
        start_epoch = checkpoint["epoch"] + 1
        best = checkpoint["best_val_loss"]
    else:
        best = float("inf")
    records = []
    for epoch in range(start_epoch, epochs):
        train_loss = train_one_epoch(model, train_loader, optimizer, scheduler, criterion, epoch, kind)
        val_loss, val_acc = evaluate(model, val_loader, criterion)
        if kind == "plateau":
            scheduler.step(val_loss)
        elif kind in ("sequential", "multistep"):
            scheduler.step()
        best = min(best, val_loss)
        lrs = [group["lr"] for group in optimizer.param_groups]
        records.append([epoch, train_loss, val_loss, val_acc, best] + lrs)
        records.append({k: (v.numpy() if hasattr(v, "numpy") else np.asarray(v)).copy() for k, v in model.state_dict().items()})
        if stop_after is not None and epoch == stop_after:
            torch.save({
                "epoch": epoch,
                "model_state_dict": model.state_dict(),
                "optimizer_state_dict": optimizer.state_dict(),
                "scheduler_state_dict": scheduler.state_dict(),
                "best_val_loss": best,
            }, path)
            break
    return records
"""

SCRIPT_STEP = [
    (
        "        loss.backward()\n        optimizer.step()",
        "        grads = loss.backward()\n        optimizer.step(grads)",
    )
]


def shared_dropout(monkeypatch, lib, seed):
    """``nn.Dropout`` in training mode drawing its keep-masks from one seeded stream (the
    library's own dropout runs in eval mode)."""
    rng = np.random.default_rng(seed)
    original = lib.nn.Dropout.forward

    def forward(self, x):
        if not self.training or self.p == 0.0:
            return original(self, x)
        keep = rng.uniform(size=tuple(x.shape)) >= self.p
        return x * lib.tensor(keep / (1.0 - self.p), dtype=x.dtype)

    monkeypatch.setattr(lib.nn.Dropout, "forward", forward)


@pytest.mark.parametrize(
    ("kind", "optimizer"),
    [
        ("onecycle", "sgd"),
        ("onecycle", "adamw"),
        ("warm_restarts", "adamw"),
        ("plateau", "sgd"),
        ("sequential", "adamw"),
        ("multistep", "sgd"),
    ],
)
def test_training_script_with_scheduler_and_checkpoint_matches_torch(
    monkeypatch, tmp_path, kind, optimizer
):
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((40, 8)), rng.integers(0, 3, 40)
    x_val, y_val = rng.standard_normal((20, 8)), rng.integers(0, 3, 20)
    theirs, ours = both(SCRIPT_SOURCE, SCRIPT_STEP)
    torch.manual_seed(0)
    initial = state_of(theirs["Net"]())
    runs = {}
    for name, lib, names in (("torch", torch, theirs), ("rg", rg, ours)):
        path = str(tmp_path / f"{name}.pt")
        fit = names["fit"]
        with monkeypatch.context() as patch:
            shared_dropout(patch, lib, 1)
            whole = fit(x, y, x_val, y_val, kind, optimizer, 5, path, state=initial)
        with monkeypatch.context() as patch:
            shared_dropout(patch, lib, 1)
            first = fit(x, y, x_val, y_val, kind, optimizer, 5, path, state=initial, stop_after=1)
            rest = fit(x, y, x_val, y_val, kind, optimizer, 5, path, state=initial, resume=True)
        runs[name] = (whole, first + rest)
    assert_records_agree(runs["rg"][0], runs["torch"][0], rtol=1e-5, atol=1e-6)
    for whole, resumed in runs.values():  # resuming from the checkpoint changes no bit
        assert_records_agree(resumed, whole, rtol=0.0, atol=0.0)


# -- the defect found ------------------------------------------------------------------------------
def test_default_collate_keeps_a_field_of_strings_a_tuple_as_torch_does():
    pairs = list(zip(range(5), ["a", "b", "c", "d", "e"]))
    got = next(iter(rg.utils.data.DataLoader(pairs, batch_size=2)))
    expected = next(iter(torch.utils.data.DataLoader(pairs, batch_size=2)))
    assert type(got) is type(expected) is list
    assert got[1] == expected[1] == ("a", "b")
    assert got[0].tolist() == expected[0].tolist()
    strings = ["x", "y", "z"]
    assert next(iter(rg.utils.data.DataLoader(strings, batch_size=2))) == ["x", "y"]
    assert next(iter(torch.utils.data.DataLoader(strings, batch_size=2))) == ["x", "y"]
