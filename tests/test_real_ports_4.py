"""Real ports, continued (the harness: ``tests/real_ports.py``): programs written here in the
style of timm/DeiT vision transformers and of everyday PyTorch training scripts, run under
torch and, ported, under retrograd from the same weights and draws.

- A small ViT: a ``Conv2d`` patch embedding with ``flatten(2).transpose(1, 2)``, a zero class
  token expanded and concatenated, a learned position table, ``trunc_normal_`` and an
  initializer applied over the modules (``xavier_uniform_`` of the conv weight's ``.data``
  viewed 2-d), then either ``nn.TransformerEncoder`` of
  ``TransformerEncoderLayer(activation="gelu", batch_first=True, norm_first=True)`` or pre-norm
  blocks around ``nn.MultiheadAttention(batch_first=True)`` (``need_weights=False``);
  ``@torch.jit.ignore`` on the no-decay names, parameter groups by ``param.ndim``, AdamW, a
  ``LambdaLR`` warmup + cosine, ``CrossEntropyLoss(label_smoothing=...)``,
  ``clip_grad_norm_`` and ``torch.max(outputs.data, 1)`` accuracy;
- a tabular training script: a ``Dataset`` of dict samples with a ``collate_fn``, a
  ``TensorDataset``, a validation ``Dataset`` whose string field the default collate batches
  as a tuple, ``DataLoader(drop_last=True)``, a ``Sequential`` MLP with ``BatchNorm1d`` and
  ``Dropout`` toggled by ``train()``/``eval()``, an init loop over ``self.modules()``
  (``kaiming_normal_(mode="fan_out")``, ``ones_``/``zeros_``), SGD (nesterov, weight decay)
  or AdamW under ``OneCycleLR`` (per batch), ``CosineAnnealingWarmRestarts`` stepped with
  fractional epochs, ``ReduceLROnPlateau`` on the validation loss, ``SequentialLR`` of
  ``LinearLR`` and ``CosineAnnealingLR``, or ``MultiStepLR``; an ``@torch.no_grad()``
  evaluation; and a checkpoint (model, optimizer and scheduler state dicts) written by
  ``torch.save`` after the second epoch, loaded by ``torch.load`` into new objects and trained
  on: the resumed run equals the uninterrupted one bit for bit, in both libraries, and
  retrograd's equals torch's.

Dropout masks come from one seeded stream for both libraries (:func:`shared_dropout`).

The regression guarded: ``default_collate`` gave a field of strings as a list where torch
keeps the tuple ``zip`` made (``[tensor([0, 1]), ('a', 'b')]``).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import assert_records_agree, both, state_of

# -- a small ViT -----------------------------------------------------------------------------------
VIT_SOURCE = """
class Patches(nn.Module):
    # non-overlapping patch x patch squares, each projected to a width-wide token
    def __init__(self, side, patch, channels, width):
        super().__init__()
        self.count = (side // patch) ** 2
        self.proj = nn.Conv2d(channels, width, kernel_size=patch, stride=patch)

    def forward(self, images):
        return self.proj(images).flatten(2).transpose(1, 2)  # (batch, patches, width)

def mlp_block(width, ratio, p):
    inner = int(width * ratio)
    return nn.Sequential(
        nn.Linear(width, inner), nn.GELU(), nn.Dropout(p), nn.Linear(inner, width), nn.Dropout(p)
    )

class TinyViT(nn.Module):
    def __init__(self, side=8, patch=4, channels=3, classes=4, width=16, depth=2, heads=2,
                 ratio=2.0, p=0.1, own_blocks=False):
        super().__init__()
        self.patches = Patches(side, patch, channels, width)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, width))
        self.pos_embed = nn.Parameter(torch.zeros(1, self.patches.count + 1, width))
        self.drop = nn.Dropout(p=p)
        self.own_blocks = own_blocks
        if own_blocks:
            self.pre_attn = nn.ModuleList([nn.LayerNorm(width, eps=1e-6) for _ in range(depth)])
            self.attn = nn.ModuleList(
                nn.MultiheadAttention(width, heads, dropout=0.0, batch_first=True)
                for _ in range(depth)
            )
            self.pre_mlp = nn.ModuleList([nn.LayerNorm(width, eps=1e-6) for _ in range(depth)])
            self.mlp = nn.ModuleList([mlp_block(width, ratio, p) for _ in range(depth)])
        else:
            layer = nn.TransformerEncoderLayer(
                d_model=width, nhead=heads, dim_feedforward=int(width * ratio), dropout=p,
                activation="gelu", batch_first=True, norm_first=True,
            )
            self.blocks = nn.TransformerEncoder(layer, num_layers=depth, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, classes) if classes else nn.Identity()
        for table in (self.pos_embed, self.cls_token):
            nn.init.trunc_normal_(table, std=0.02)
        self.apply(self.init_module)

    def init_module(self, m):
        if isinstance(m, nn.Conv2d):
            # as a linear map of the flattened patch
            kernel = m.weight.data
            torch.nn.init.xavier_uniform_(kernel.view([kernel.shape[0], -1]))
        elif isinstance(m, (nn.LayerNorm,)):
            nn.init.constant_(m.bias, 0.0)
            nn.init.constant_(m.weight, 1)
        elif isinstance(m, nn.Linear):
            nn.init.trunc_normal_(m.weight, std=0.02)
            if m.bias is not None:
                nn.init.constant_(m.bias, 0)

    @torch.jit.ignore
    def undecayed_names(self):
        return {"cls_token", "pos_embed"}

    def forward(self, images):
        tokens = self.patches(images)
        cls = self.cls_token.expand(tokens.shape[0], -1, -1)
        x = self.drop(torch.cat((cls, tokens), dim=1) + self.pos_embed)
        if self.own_blocks:
            for i, attend in enumerate(self.attn):
                q = self.pre_attn[i](x)
                mixed, _ = attend(q, q, q, need_weights=False)
                x = x + mixed
                x = x + self.mlp[i](self.pre_mlp[i](x))
        else:
            x = self.blocks(x)
        return self.head(self.norm(x)[:, 0])  # the class token's final state

def decay_groups(model, decay, skip=()):
    # no decay for vectors (biases, norms), nor for the names the model lists
    plain, decayed = [], []
    for name, p in model.named_parameters():
        if p.requires_grad:
            (plain if p.ndim <= 1 or name.endswith(".bias") or name in skip else decayed).append(p)
    return [{"params": plain, "weight_decay": 0.0}, {"params": decayed, "weight_decay": decay}]

def fit(model, batches, epochs=2, warmup=2):
    groups = decay_groups(model, 0.05, model.undecayed_names())
    opt = torch.optim.AdamW(groups, lr=1e-3, betas=(0.9, 0.999))
    total = epochs * len(batches)

    def factor(step):
        if step < warmup:
            return (step + 1) / warmup
        return 0.5 * (1.0 + math.cos(math.pi * (step - warmup) / max(1, total - warmup)))

    schedule = torch.optim.lr_scheduler.LambdaLR(opt, factor)
    loss_fn = nn.CrossEntropyLoss(label_smoothing=0.1)
    log = []
    for _ in range(epochs):
        model.train()
        for pixels, labels in batches:
            loss = loss_fn(model(pixels), labels)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=0.5)
            opt.step()
            schedule.step()
            log.append([loss.item(), schedule.get_last_lr()[0]])
        model.eval()
        right = seen = 0
        with torch.no_grad():
            for pixels, labels in batches:
                _, guess = torch.max(model(pixels).data, 1)
                seen += labels.size(0)
                right += (guess == labels).sum().item()
        log.append(100 * right / seen)
        log.append({n: p.detach().numpy().copy() for n, p in model.named_parameters()})
    return log
"""

VIT_STEP = [
    (
        "            loss.backward()\n"
        "            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=0.5)\n"
        "            opt.step()",
        "            grads = loss.backward()\n"
        "            torch.nn.utils.clip_grad_norm_(grads, model.parameters(), max_norm=0.5)\n"
        "            opt.step(grads)",
    )
]


def _images(lib):
    rng = np.random.default_rng(0)
    return [
        (lib.tensor(rng.standard_normal((3, 3, 8, 8))), lib.tensor(rng.integers(0, 4, 3)))
        for _ in range(2)
    ]


@pytest.mark.parametrize("blocks", ["TransformerEncoderLayer", "MultiheadAttention"])
def test_small_vit_training_matches_torch(blocks):
    theirs, ours = both(VIT_SOURCE, VIT_STEP)
    own_blocks = blocks == "MultiheadAttention"
    torch.manual_seed(0)
    reference = theirs["TinyViT"](p=0.0, own_blocks=own_blocks).double()
    model = ours["TinyViT"](p=0.0, own_blocks=own_blocks).double()
    model.load_state_dict(state_of(reference))
    expected = theirs["fit"](reference, _images(torch))
    got = ours["fit"](model, _images(rg))
    assert_records_agree(got, expected, rtol=1e-9, atol=1e-11)


# -- a tabular training script: schedulers, train/eval, a checkpoint in the middle ---------------
SCRIPT_SOURCE = """
from torch.utils.data import DataLoader, Dataset, TensorDataset

class Rows(Dataset):
    def __init__(self, features, labels):
        self.features = torch.tensor(features, dtype=torch.float32)
        self.labels = torch.tensor(labels, dtype=torch.long)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return {"features": self.features[i], "label": self.labels[i]}

def to_batch(items):
    labels = torch.tensor([it["label"] for it in items])  # a list of 0-d tensors
    return torch.stack([it["features"] for it in items]), labels

class NamedRows(Dataset):
    # (features, label, name): the default collate batches the names as a tuple
    def __init__(self, features, labels):
        x = torch.tensor(features, dtype=torch.float32)
        self.pairs = TensorDataset(x, torch.tensor(labels))

    def __len__(self):
        return len(self.pairs)

    def __getitem__(self, i):
        return (*self.pairs[i], f"row{i}")

class Classifier(nn.Module):
    def __init__(self, n_in=6, hidden=16, classes=3, p=0.3):
        super().__init__()
        layers = []
        for width_in in (n_in, hidden):
            layers += [nn.Linear(width_in, hidden, bias=False), nn.BatchNorm1d(hidden)]
            layers += [nn.ReLU(), nn.Dropout(p)]
        self.body = nn.Sequential(*layers, nn.Linear(hidden, classes))
        for m in self.modules():
            if isinstance(m, nn.BatchNorm1d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.kaiming_normal_(m.weight, nonlinearity="relu", mode="fan_out")
                if m.bias is not None:
                    nn.init.zeros_(m.bias)

    def forward(self, x):
        return self.body(x)

def build(model, opt_name, schedule, per_epoch, epochs):
    lrs = torch.optim.lr_scheduler
    if opt_name == "sgd":
        opt = torch.optim.SGD(
            model.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=5e-4
        )
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=0.01, weight_decay=1e-2)
    if schedule == "onecycle":
        sched = lrs.OneCycleLR(opt, max_lr=0.05, steps_per_epoch=per_epoch, epochs=epochs)
    elif schedule == "warm_restarts":
        sched = lrs.CosineAnnealingWarmRestarts(opt, T_0=2, T_mult=2, eta_min=1e-4)
    elif schedule == "plateau":
        sched = lrs.ReduceLROnPlateau(opt, mode="min", factor=0.5, patience=0, threshold=1e-1)
    elif schedule == "sequential":
        ramp = lrs.LinearLR(opt, start_factor=0.1, total_iters=2)
        decay = lrs.CosineAnnealingLR(opt, T_max=epochs - 2, eta_min=1e-4)
        sched = lrs.SequentialLR(opt, schedulers=[ramp, decay], milestones=[2])
    else:
        sched = lrs.MultiStepLR(opt, milestones=[1, 3], gamma=0.1)
    return opt, sched

@torch.no_grad()
def validate(model, loader, loss_fn):
    model.eval()
    loss_sum, right, seen, names = 0.0, 0, 0, None
    for x, y, batch_names in loader:
        out = model(x)
        loss_sum += loss_fn(out, y).item() * x.size(0)
        right += (out.argmax(dim=1) == y).sum().item()
        seen += y.size(0)
        names = names or batch_names
    return loss_sum / seen, right / seen, f"{type(names).__name__}:{','.join(names)}"

def run(X, y, Xv, yv, schedule, opt_name, epochs, path, state=None, stop_after=None, resume=False):
    train_loader = DataLoader(
        Rows(X, y), batch_size=8, shuffle=False, collate_fn=to_batch, drop_last=True
    )
    val_loader = DataLoader(NamedRows(Xv, yv), batch_size=6)
    model = Classifier()
    if state is not None:
        model.load_state_dict({name: torch.tensor(a) for name, a in state.items()})
    loss_fn = nn.CrossEntropyLoss()
    opt, sched = build(model, opt_name, schedule, len(train_loader), epochs)
    first, best = 0, float("inf")
    if resume:
        saved = torch.load(path, weights_only=False)
        model.load_state_dict(saved["model"])
        opt.load_state_dict(saved["optimizer"])
        sched.load_state_dict(saved["scheduler"])
        first, best = saved["epoch"] + 1, saved["best"]
    log = []
    for epoch in range(first, epochs):
        model.train()
        summed = 0.0
        for i, (x, target) in enumerate(train_loader):
            opt.zero_grad()
            loss = loss_fn(model(x), target)
            loss.backward()
            opt.step()
            if schedule == "onecycle":
                sched.step()
            elif schedule == "warm_restarts":
                sched.step(epoch + i / len(train_loader))  # a fractional epoch
            summed += loss.item() * x.size(0)
        val_loss, val_acc, names = validate(model, val_loader, loss_fn)
        if schedule == "plateau":
            sched.step(val_loss)
        elif schedule in ("sequential", "multistep"):
            sched.step()
        best = min(best, val_loss)
        mean_loss = summed / len(train_loader.dataset)
        rates = [g["lr"] for g in opt.param_groups]
        log.append([epoch, mean_loss, val_loss, val_acc, best] + rates)
        log.append(names)
        log.append({k: np.asarray(v.numpy()).copy() for k, v in model.state_dict().items()})
        if epoch == stop_after:
            torch.save(
                {"epoch": epoch, "best": best, "model": model.state_dict(),
                 "optimizer": opt.state_dict(), "scheduler": sched.state_dict()},
                path,
            )
            break
    return log
"""

SCRIPT_STEP = [
    (
        "            loss.backward()\n            opt.step()",
        "            grads = loss.backward()\n            opt.step(grads)",
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
    x, y = rng.standard_normal((32, 6)), rng.integers(0, 3, 32)
    x_val, y_val = rng.standard_normal((12, 6)), rng.integers(0, 3, 12)
    theirs, ours = both(SCRIPT_SOURCE, SCRIPT_STEP)
    torch.manual_seed(0)
    initial = state_of(theirs["Classifier"]())
    runs = {}
    for name, lib, names in (("torch", torch, theirs), ("rg", rg, ours)):
        path = str(tmp_path / f"{name}.pt")
        run = names["run"]
        with monkeypatch.context() as patch:
            shared_dropout(patch, lib, 1)
            whole = run(x, y, x_val, y_val, kind, optimizer, 5, path, state=initial)
        with monkeypatch.context() as patch:
            shared_dropout(patch, lib, 1)
            first = run(x, y, x_val, y_val, kind, optimizer, 5, path, state=initial, stop_after=1)
            rest = run(x, y, x_val, y_val, kind, optimizer, 5, path, state=initial, resume=True)
        runs[name] = (whole, first + rest)
    assert runs["torch"][0][1] == "tuple:row0,row1,row2,row3,row4,row5"
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
