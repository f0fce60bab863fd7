"""A program written here in the style of the inner loop of Hugging Face's ``Trainer``
(``training_step`` and the accumulation loop of transformers 4.2x) over a small classifier, run
under torch and, ported, under retrograd from the same weights and draws (the harness:
``tests/real_ports.py``).

- the step: ``loss = loss / gradient_accumulation_steps`` and
  ``self.scaler.scale(loss).backward()``, returning ``loss.detach()``;
- the running loss on tensors: ``torch.tensor(0.0).to(device)``, ``+=`` each step and, when
  logging, ``running -= running`` in place;
- the accumulation condition (``(step + 1) % accumulation == 0`` or an epoch shorter than one
  accumulation), ``scaler.unscale_`` then ``nn.utils.clip_grad_norm_``;
- the AMP step that may be skipped: ``get_scale()`` before and after ``step``/``update``,
  ``optimizer_was_run = before <= after``, the scheduler stepped only when the optimizer ran
  (``torch.amp.GradScaler("cpu", ..., growth_interval=2)``: a float32 run never overflows, the
  scale doubles every second step);
- warmup schedules in the manner of ``optimization.py``: cosine with hard restarts and
  polynomial decay, ``LambdaLR`` over ``functools.partial``, ``optimizer.defaults["lr"]``;
  ``AdamW`` parameter groups without decay for biases and LayerNorm; ``model.zero_grad()``.

The port changes the ``import`` lines and the gradient lines (``backward()`` returns the
gradients, summed over the accumulation steps and handed to the scaler and clipping).
"""

from __future__ import annotations

import functools
import random
import types

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import (
    assert_records_agree,
    global_streams_restored,  # noqa: F401 (a fixture: the tests seed every stream)
    initializer,
    params_of,
    runs_with_draws,
)


@pytest.fixture(autouse=True)
def _seeded(global_streams_restored):  # noqa: F811 (the fixture imported above)
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    rg.seed(0)


HF_INNER_LOOP_SOURCE = """
import torch
from torch import nn
from torch.optim import lr_scheduler


def warm_cosine_restarts(step, *, warmup, total, cycles):
    if step < warmup:
        return step / max(1, warmup)
    done = (step - warmup) / max(1, total - warmup)
    if done >= 1.0:
        return 0.0
    return max(0.0, 0.5 * (1.0 + math.cos(math.pi * ((cycles * done) % 1.0))))


def warm_polynomial(step, *, warmup, total, base, floor, power):
    if step < warmup:
        return step / max(1, warmup)
    if step > total:
        return floor / base
    left = 1 - (step - warmup) / (total - warmup)
    return ((base - floor) * left**power + floor) / base  # LambdaLR multiplies by base


def make_schedule(kind, optimizer, warmup, total):
    if kind == "cosine":
        rule = functools.partial(warm_cosine_restarts, warmup=warmup, total=total, cycles=2)
    else:
        base = optimizer.defaults["lr"]
        rule = functools.partial(warm_polynomial, warmup=warmup, total=total, base=base,
                                 floor=1e-5, power=2.0)
    return lr_scheduler.LambdaLR(optimizer, rule)


class BagOfEmbeddings(nn.Module):
    def __init__(self, vocab=16, width=8, labels=3):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.LayerNorm = nn.LayerNorm(width, eps=1e-12)
        self.pool = nn.Linear(width, width)
        self.head = nn.Linear(width, labels)

    def forward(self, input_ids, attention_mask, labels):
        keep = attention_mask.unsqueeze(-1).to(torch.float32)
        tokens = self.LayerNorm(self.embed(input_ids)) * keep
        pooled = torch.tanh(self.pool(tokens.sum(1) / keep.sum(1)))
        logits = self.head(pooled)
        return nn.functional.cross_entropy(logits, labels), logits


class MiniTrainer:
    def __init__(self, model, cfg, loader):
        self.model, self.cfg, self.loader = model, cfg, loader
        if torch.cuda.is_available():
            self.scaler = torch.cuda.amp.GradScaler(init_scale=2.0**16, growth_interval=2)
        else:
            self.scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16, growth_interval=2)

    def training_step(self, batch):
        self.model.train()
        loss = self.model(**batch)[0]
        if self.cfg.accumulation > 1:
            loss = loss / self.cfg.accumulation
        scaled = self.scaler.scale(loss)
        scaled.backward()
        return loss.detach()

    def train(self):
        cfg, model = self.cfg, self.model
        named = list(model.named_parameters())
        plain = [n.endswith("bias") or "LayerNorm" in n for n, _ in named]
        groups = [
            {"params": [p for (_, p), f in zip(named, plain) if not f], "weight_decay": 0.05},
            {"params": [p for (_, p), f in zip(named, plain) if f], "weight_decay": 0.0},
        ]
        opt = self.optimizer = torch.optim.AdamW(groups, lr=cfg.lr)
        scaler = self.scaler
        per_epoch = len(self.loader)
        total = math.ceil(cfg.epochs * per_epoch / cfg.accumulation)
        schedule = make_schedule(cfg.schedule, opt, cfg.warmup, total)
        running = torch.tensor(0.0).to(cfg.device)
        logged, updates = 0.0, 0
        model.zero_grad()
        for epoch in range(cfg.epochs):
            for step, batch in enumerate(self.loader):
                running += self.training_step(batch)
                boundary = (step + 1) % cfg.accumulation == 0
                short_epoch = per_epoch <= cfg.accumulation and step + 1 == per_epoch
                if not (boundary or short_epoch):
                    continue
                scaler.unscale_(opt)
                nn.utils.clip_grad_norm_(model.parameters(), cfg.max_norm)
                before = scaler.get_scale()
                scaler.step(opt)
                scaler.update()
                optimizer_was_run = before <= scaler.get_scale()
                if optimizer_was_run:
                    schedule.step()
                model.zero_grad()
                updates += 1
                ran, lr = float(optimizer_was_run), schedule.get_last_lr()[0]
                record.extend([[ran, scaler.get_scale(), lr], params_of(model)])
                if updates % cfg.log_every == 0:
                    value = running.item()
                    running -= running  # back to zero, in place
                    logged += value
                    record.append(value / cfg.log_every)
        record.append(logged + running.item())


def toy_batches(count, rng):
    out = []
    for _ in range(count):
        lengths = rng.integers(2, 6, size=(3, 1))
        out.append({
            "input_ids": torch.tensor(rng.integers(0, 16, size=(3, 5))),
            "attention_mask": torch.tensor((np.arange(5)[None, :] < lengths).astype(np.int64)),
            "labels": torch.tensor(rng.integers(0, 3, size=3)),
        })
    return out


for schedule in ("cosine", "polynomial"):
    model = BagOfEmbeddings()
    initialize(model)
    cfg = types.SimpleNamespace(device="cpu", lr=1e-2, epochs=2, accumulation=2, warmup=1,
                                max_norm=1.0, log_every=2, schedule=schedule)
    MiniTrainer(model, cfg, toy_batches(5, np.random.default_rng(216))).train()
"""

HF_INNER_LOOP_STEPS = [
    (
        "import torch\nfrom torch import nn\n",
        "import retrograd as torch\nfrom retrograd import nn\n",
    ),
    (
        "        scaled.backward()\n",
        "        grads = scaled.backward()\n"
        "        held = getattr(self, 'grads', None)\n"
        "        self.grads = grads if held is None else held + grads\n",
    ),
    ("scaler.unscale_(opt)", "scaler.unscale_(opt, self.grads)"),
    (
        "nn.utils.clip_grad_norm_(model.parameters(), cfg.max_norm)",
        "nn.utils.clip_grad_norm_(self.grads, model.parameters(), cfg.max_norm)",
    ),
    ("scaler.step(opt)\n", "scaler.step(opt, self.grads)\n"),
    (
        "                model.zero_grad()\n                updates += 1\n",
        "                model.zero_grad()\n                self.grads = None\n"
        "                updates += 1\n",
    ),
]


def test_hugging_face_inner_loop_with_accumulation_and_skipped_amp_steps_trains_as_torch(capsys):
    (theirs, ours), _ = runs_with_draws(
        HF_INNER_LOOP_SOURCE, HF_INNER_LOOP_STEPS, capsys, 216, initialize=initializer(),
        params_of=params_of, functools=functools, types=types,
    )  # fmt: skip
    steps = [r for r in theirs if isinstance(r, list)]
    assert [scale for _, scale, _ in steps[:4]] == [2.0**16, 2.0**17, 2.0**17, 2.0**18]
    assert len(steps) == 8 and all(ran == 1.0 for ran, _, _ in steps)
    assert_records_agree(ours, theirs, rtol=2e-4, atol=1e-5)
