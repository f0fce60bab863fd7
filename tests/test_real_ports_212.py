"""Real ports (the harness: ``tests/real_ports.py``): a program written here in the style of
Hugging Face's ``Trainer`` checkpoint-and-resume machinery, as a manual loop over a small
model, run against torch's run of the same text from the same weights and draws.

- no-decay parameter groups found by walking ``named_children()`` and each module's
  ``_parameters`` (biases and LayerNorm weights excluded), ``AdamW(..., betas=..., eps=...)``;
- a linear warmup/decay schedule: a ``LambdaLR`` over a ``functools.partial`` with
  keyword-only arguments, ``get_last_lr()``;
- AMP pieces with a CPU ``torch.amp.GradScaler("cpu", init_scale=..., growth_interval=...)``:
  ``scale(loss).backward()``, ``unscale_`` then ``clip_grad_norm_`` (its norm read by
  ``float``), ``scaler.step``, ``scaler.update``, ``get_scale()``; a model whose ``forward``
  takes ``labels=`` and returns a dict, called as ``model(**batch)``; an augmentation drawn
  from NumPy's and Python's global streams;
- the checkpoint: ``torch.save`` of the model's, optimizer's, scheduler's and scaler's state
  dicts and of ``{"python": random.getstate(), "numpy": np.random.get_state(), "cpu":
  torch.random.get_rng_state()}`` (NumPy's state holds a uint32 array, which ``rg.save``
  refused before); the resume: ``torch.load(..., map_location="cpu", weights_only=...)``,
  ``load_state_dict(state, False)`` and its ``missing_keys``/``unexpected_keys``,
  ``torch.random.set_rng_state``, and the steps already trained skipped: the resumed run gives
  the uninterrupted run's trajectory.

The lines changed: the ``import`` lines and the gradient lines.
"""

from __future__ import annotations

import functools
import os
import random

import numpy as np
import torch

from real_ports import (
    assert_records_agree,
    params_of,
    runs_with_draws,
    seeded_draws,  # noqa: F401 (autouse: each test from fixed seeds)
)

TRAINER_SOURCE = """
import torch
from torch import nn
from torch.optim import lr_scheduler

NO_DECAY_TYPES = (nn.LayerNorm,)


def decayed_names(module, prefix=""):
    # parameters outside normalisation layers, by their dotted names
    names = [prefix + key for key in module._parameters]
    for child_name, child in module.named_children():
        if not isinstance(child, NO_DECAY_TYPES):
            names += decayed_names(child, prefix + child_name + ".")
    return names


def warmup_then_linear(step: int, *, warmup: int, total: int):
    if step < warmup:
        return step / max(1, warmup)
    return max(0.0, (total - step) / max(1, total - warmup))


class TinyTagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(6, 10)
        self.norm = nn.LayerNorm(10)
        self.mlp = nn.Linear(10, 10)
        self.out = nn.Linear(10, 3)

    def forward(self, features, labels=None):
        h = self.norm(torch.tanh(self.proj(features)))
        logits = self.out(h + torch.relu(self.mlp(h)))
        return {"loss": nn.functional.cross_entropy(logits, labels), "logits": logits}


def build(cfg, total_steps):
    model = TinyTagger()
    initialize(model)
    keep = {n for n in decayed_names(model) if not n.endswith("bias")}
    named = list(model.named_parameters())
    groups = [
        {"params": [p for n, p in named if n in keep], "weight_decay": cfg["decay"]},
        {"params": [p for n, p in named if n not in keep], "weight_decay": 0.0},
    ]
    opt = torch.optim.AdamW(groups, lr=cfg["lr"], betas=(0.9, 0.98), eps=1e-7)
    ramp = functools.partial(warmup_then_linear, warmup=cfg["warmup"], total=total_steps)
    sched = lr_scheduler.LambdaLR(opt, ramp, -1)
    scaler = torch.amp.GradScaler("cpu", init_scale=128.0, growth_interval=2)
    return model, opt, sched, scaler


def jitter(batch):
    x = batch["features"]
    noise = np.random.normal(0.0, 0.1, size=tuple(x.shape)).astype(np.float32)
    gain = random.uniform(0.9, 1.1)
    return {"features": x * gain + torch.tensor(noise), "labels": batch["labels"]}


def save_all(where, step, model, opt, sched, scaler):
    os.makedirs(where, exist_ok=True)
    parts = {"weights.bin": model, "optim.pt": opt, "sched.pt": sched, "scaler.pt": scaler}
    for filename, owner in parts.items():
        torch.save(owner.state_dict(), os.path.join(where, filename))
    streams = {"python": random.getstate(), "numpy": np.random.get_state(),
               "cpu": torch.random.get_rng_state()}
    torch.save(streams, os.path.join(where, "rng.pth"))
    torch.save({"step": step}, os.path.join(where, "progress.pt"))


def restore_all(where, model, opt, sched, scaler):
    def read(filename, **options):
        return torch.load(os.path.join(where, filename), **options)

    weights = read("weights.bin", map_location="cpu", weights_only=True)
    report = model.load_state_dict(weights, False)
    assert report.missing_keys == [] and report.unexpected_keys == []
    opt.load_state_dict(read("optim.pt", map_location="cpu", weights_only=True))
    sched.load_state_dict(read("sched.pt", weights_only=True))
    scaler.load_state_dict(read("scaler.pt"))
    streams = read("rng.pth", weights_only=False)
    random.setstate(streams["python"])
    np.random.set_state(streams["numpy"])
    torch.random.set_rng_state(streams["cpu"])
    return read("progress.pt")["step"]


def run(cfg, batches, resume=None, stop_at=None, log=None):
    total = cfg["epochs"] * len(batches)
    model, opt, sched, scaler = build(cfg, total)
    done = restore_all(resume, model, opt, sched, scaler) if resume else 0
    model.train()
    for step in range(done, total):
        batch = jitter(batches[step % len(batches)])
        loss = model(**batch)["loss"]
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg["clip"])
        scaler.step(opt)
        scaler.update()
        sched.step()
        opt.zero_grad()
        lr, scale = sched.get_last_lr()[0], scaler.get_scale()
        log.append((loss.item(), float(norm), lr, scale, params_of(model)))
        if step + 1 == stop_at:
            where = os.path.join(output_dir, "ckpt-%d" % stop_at)
            save_all(where, stop_at, model, opt, sched, scaler)
            return


cfg = {"lr": 4e-3, "decay": 0.02, "epochs": 2, "warmup": 2, "clip": 0.5}
batches = [{"features": torch.randn(4, 6), "labels": torch.randint(0, 3, (4,))} for _ in range(3)]
py_state, np_state = random.getstate(), np.random.get_state()
straight = []
run(cfg, batches, log=straight)
random.setstate(py_state)
np.random.set_state(np_state)
before, after = [], []
run(cfg, batches, stop_at=4, log=before)
random.seed(99)
np.random.seed(99)  # the streams move on in between: the checkpoint must restore them
run(cfg, batches, resume=os.path.join(output_dir, "ckpt-4"), log=after)
for log in (straight, before + after):
    for entry in log:
        record.extend(entry)
"""

TRAINER_STEPS = [
    (
        "import torch\nfrom torch import nn\n",
        "import retrograd as torch\nfrom retrograd import nn\n",
    ),
    (
        "        scaler.scale(loss).backward()\n        scaler.unscale_(opt)\n",
        "        grads = scaler.scale(loss).backward()\n        scaler.unscale_(opt, grads)\n",
    ),
    ("clip_grad_norm_(model.parameters(),", "clip_grad_norm_(grads, model.parameters(),"),
    ("scaler.step(opt)", "scaler.step(opt, grads)"),
]


def test_trainer_checkpoint_resume_gives_the_uninterrupted_trajectory_as_torch(capsys, tmp_path):
    made = []

    def output_dir(lib):
        made.append(tmp_path / lib.__name__)
        return str(made[-1])

    # each run of the program builds three models (straight, interrupted, resumed), all
    # from the same weights: torch's first model's
    states = []

    def initialize(module):
        if isinstance(module, torch.nn.Module):
            if not states:
                states.append(
                    {k: v.detach().numpy().copy() for k, v in module.state_dict().items()}
                )
            module.load_state_dict({k: torch.tensor(v) for k, v in states[0].items()})
        else:
            module.load_state_dict(states[0])

    (theirs, ours), _ = runs_with_draws(
        TRAINER_SOURCE, TRAINER_STEPS, capsys, 21201, initialize=initialize, params_of=params_of,
        functools=functools, os=os, random=random, make_output_dir=output_dir,
    )  # fmt: skip
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-6)
    half = len(ours) // 2
    # the resumed run is the uninterrupted one, step for step (the same ops in the same order)
    assert_records_agree(ours[half:], ours[:half], rtol=0, atol=0)
    checkpoint = made[1] / "ckpt-4"
    assert sorted(os.listdir(checkpoint)) == [
        "optim.pt", "progress.pt", "rng.pth", "scaler.pt", "sched.pt", "weights.bin",
    ]  # fmt: skip
    # torch reads the RNG states retrograd saved (NumPy's uint32 key as NumPy pickles it)
    states = torch.load(checkpoint / "rng.pth", weights_only=False)
    assert states["numpy"][1].dtype == np.uint32 and states["numpy"][0] == "MT19937"
