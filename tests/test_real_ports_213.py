"""Real ports (the harness: ``tests/real_ports.py``): checkpoint and state-dict surgery, a
program written here in the style of timm's training and fine-tuning scripts and of
nanoGPT's checkpointing, run against torch's run of the same text from the same weights and
draws.

Surface: weight-decay param groups (1-d parameters, biases and named exceptions without
decay) for a Nesterov ``SGD``; a model under ``torch.compile`` (its state dict's keys start
with ``_orig_mod.``) and an EMA copy made by ``deepcopy`` and updated under
``@torch.no_grad()`` by ``copy_`` over ``state_dict().values()`` (its keys start with
``module.``); unwrapping through ``.module`` and ``._orig_mod``; a checkpoint dict (epoch,
arch, version, metric, ``state_dict``, ``optimizer.state_dict()``, the EMA's state) written by
``torch.save`` and read by ``torch.load(..., map_location="cpu", weights_only=False)``; prefixes
stripped and a fresh model and optimizer resumed (``optimizer.load_state_dict``), continuing
the original's trajectory exactly; fine-tuning with a new head (keys deleted,
``load_state_dict(strict=False)``, its ``missing_keys``/``unexpected_keys`` printed),
``copy_``/``zero_`` under ``no_grad``, ``AdamW``, ``parameters_to_vector`` for the weight norm and
``vector_to_parameters`` to restore a snapshot; the compiled model's raw checkpoint with its
prefix stripped in place and loaded with ``assign=True``.

Regression guarded: retrograd's ``compile`` returned the model itself, so the ``_orig_mod.``
keys and ``model._orig_mod`` were missing. The port changes the imports and the gradient
lines.
"""

from __future__ import annotations

import torch

from real_ports import (
    assert_records_agree,
    params_of,
    runs_with_draws,
    seeded_draws,  # noqa: F401 (autouse: each test from fixed seeds)
)

TIMM_CHECKPOINT_SOURCE = """
import os
from copy import deepcopy

import torch
import torch.nn as nn
from torch.nn import functional as F
from torch.nn.utils import vector_to_parameters, parameters_to_vector


class TinyConvNet(nn.Module):
    def __init__(self, classes=4):
        super().__init__()
        self.stem = nn.Conv2d(3, 6, 3, padding=1, bias=False)
        self.stem_bn = nn.BatchNorm2d(6)
        self.down = nn.Conv2d(6, 8, 3, stride=2, padding=1)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(8, classes)

    def forward(self, x):
        x = F.relu(self.down(F.relu(self.stem_bn(self.stem(x)))))
        return self.head(self.pool(x).flatten(1))


def decay_groups(model, weight_decay, skip=()):
    # norms, biases and the named exceptions are not decayed
    plain, decayed = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        exempt = p.ndim <= 1 or name.endswith(".bias") or name in skip
        (plain if exempt else decayed).append(p)
    return [dict(params=plain, weight_decay=0.0), dict(params=decayed, weight_decay=weight_decay)]


class EmaCopy(nn.Module):
    # an exponential moving average of another model's weights and buffers
    def __init__(self, model, decay):
        super().__init__()
        self.module = deepcopy(model).eval()
        self.decay = decay

    @torch.no_grad()
    def update(self, model):
        for mine, live in zip(self.module.state_dict().values(), model.state_dict().values()):
            mine.copy_(self.decay * mine + (1.0 - self.decay) * live)


def bare(model):
    # see through EMA or DDP (.module) and torch.compile (._orig_mod) wrappers
    while True:
        if hasattr(model, "module"):
            model = model.module
        elif hasattr(model, "_orig_mod"):
            model = model._orig_mod
        else:
            return model


def strip_prefixes(state, prefixes=("module.", "_orig_mod.")):
    out = {}
    for key, value in state.items():
        for prefix in prefixes:
            if key.startswith(prefix):
                key = key[len(prefix) :]
        out[key] = value
    return out


def fit(model, opt, batches, ema=None):
    model.train()
    for images, labels in batches:
        loss = F.cross_entropy(model(images), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if ema is not None:
            ema.update(model)
        record.append(loss.item())
        record.append(params_of(bare(model)))


def restore(model, path, opt=None):
    ckpt = torch.load(path, map_location="cpu", weights_only=False)
    if not (isinstance(ckpt, dict) and "state_dict" in ckpt):
        model.load_state_dict(ckpt)
        return None
    model.load_state_dict(strip_prefixes(ckpt["state_dict"]))
    if opt is not None and "optimizer" in ckpt:
        opt.load_state_dict(ckpt["optimizer"])
        print("optimizer state restored")
    # checkpoints of version 2 and later store the epoch just finished
    next_epoch = ckpt["epoch"] + (1 if ckpt.get("version", 1) > 1 else 0)
    print(f"resumed from {os.path.basename(path)} at epoch {next_epoch}")
    return next_epoch


def sgd_for(model):
    groups = decay_groups(model, 1e-2, skip={"head.weight"})
    return torch.optim.SGD(groups, lr=0.05, momentum=0.9, nesterov=True)


batches = []
for _ in range(5):
    batches.append((torch.randn(4, 3, 6, 6), torch.randint(0, 4, (4,))))
net = TinyConvNet()
initialize(net)
ema = EmaCopy(net, decay=0.5)
opt = sgd_for(net)
net = torch.compile(net)
record.append(repr(list(net.state_dict())[:2]))  # the compiled wrapper's keys
fit(net, opt, batches[:3], ema)

ckpt_path = os.path.join(out_dir, "last.pth.tar")
payload = {"epoch": 0, "arch": type(bare(net)).__name__, "version": 2, "metric": 0.5}
payload["state_dict"] = bare(net).state_dict()
payload["optimizer"] = opt.state_dict()
payload["state_dict_ema"] = ema.state_dict()  # keys under "module."
torch.save(payload, ckpt_path)
raw_path = os.path.join(out_dir, "raw.pt")
torch.save({"model": net.state_dict(), "iter_num": 3}, raw_path)  # keys under "_orig_mod."
fit(net, opt, batches[3:])

# a fresh model and optimizer resumed from the checkpoint repeat the last two steps
again = TinyConvNet()
again_opt = sgd_for(again)
record.append(float(restore(again, ckpt_path, again_opt)))
fit(again, again_opt, batches[3:])

# fine-tune the averaged weights on three classes: the old head is dropped
tuned = TinyConvNet(classes=3)
ckpt = torch.load(ckpt_path, map_location="cpu", weights_only=False)
weights = strip_prefixes(ckpt["state_dict_ema"])
for key in ("head.weight", "head.bias"):
    del weights[key]
weights["aux_head.weight"] = torch.zeros(3, 8)  # a head this model does not have
result = tuned.load_state_dict(weights, strict=False)
print("missing:", ", ".join(result.missing_keys))
print("unexpected:", ", ".join(result.unexpected_keys))
record.append(repr((result.missing_keys, result.unexpected_keys)))
with torch.no_grad():
    tuned.head.weight.copy_(0.1 * torch.randn(3, 8))
    tuned.head.bias.zero_()
start = parameters_to_vector(tuned.parameters()).detach().clone()
record.append(float(start.norm()))
fit(tuned, torch.optim.AdamW(tuned.parameters(), lr=1e-2), [(x, y % 3) for x, y in batches[:2]])
record.append(float(parameters_to_vector(tuned.parameters()).norm()))
vector_to_parameters(start, tuned.parameters())  # back to the loaded weights
record.append(params_of(tuned))

# the compiled model's raw checkpoint: its prefix stripped in place, loaded by assignment
ckpt = torch.load(raw_path, map_location="cpu")
weights = ckpt["model"]
for key in list(weights):
    if key.startswith("_orig_mod."):
        weights[key.removeprefix("_orig_mod.")] = weights.pop(key)
plain = TinyConvNet()
plain.load_state_dict(weights, assign=True)
record.append(params_of(plain))
record.append(float(ckpt["iter_num"]))
"""

TIMM_CHECKPOINT_STEPS = [
    (
        "import torch\nimport torch.nn as nn\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n",
    ),
    (
        "        loss.backward()\n        opt.step()\n",
        "        grads = loss.backward()\n        opt.step(grads)\n",
    ),
]


def test_timm_checkpoint_resume_and_finetune_state_dict_surgery_as_torch(capsys, tmp_path):
    states = []

    def initialize(module):
        if isinstance(module, torch.nn.Module):
            states.append({k: v.detach().numpy().copy() for k, v in module.state_dict().items()})
        else:
            module.load_state_dict(states[0])

    def out_dir(lib):
        (tmp_path / lib.__name__).mkdir()
        return str(tmp_path / lib.__name__)

    (theirs, ours), logs = runs_with_draws(
        TIMM_CHECKPOINT_SOURCE, TIMM_CHECKPOINT_STEPS, capsys, 21301, initialize=initialize,
        params_of=params_of, make_out_dir=out_dir,
    )  # fmt: skip
    assert theirs[0] == "['_orig_mod.stem.weight', '_orig_mod.stem_bn.weight']"
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-6)
    # the resumed run continues the original's trajectory (records 7-10 and 12-15)
    assert_records_agree(ours[12:16], ours[7:11], rtol=0, atol=0)
    assert logs[1].replace("retrograd", "torch") == logs[0]
    assert "missing: head.weight, head.bias\nunexpected: aux_head.weight\n" in logs[1]
