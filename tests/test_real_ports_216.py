# ruff: noqa: E501  (the programs are kept as their authors wrote them: long lines)
"""Real PyTorch programs ported to retrograd (the harness: ``tests/real_ports.py``): the inner
loop of Hugging Face's ``Trainer`` (transformers 4.2x ``trainer.py``, ``_inner_training_loop``
and ``training_step``) written out over a small classifier, run against torch's run of the
same code from the same weights and draws.

- ``training_step``: ``loss = loss / self.args.gradient_accumulation_steps`` and
  ``self.scaler.scale(loss).backward()``, returning ``loss.detach()``;
- the loop's bookkeeping on tensors: ``tr_loss = torch.tensor(0.0).to(args.device)``,
  ``tr_loss += tr_loss_step`` and, when logging, ``tr_loss -= tr_loss`` (in place);
- gradient accumulation's update condition (``(step + 1) % gradient_accumulation_steps == 0``
  or the epoch's last short chunk), ``scaler.unscale_`` then ``nn.utils.clip_grad_norm_``;
- the AMP step that may be skipped: ``scale_before = self.scaler.get_scale()``, ``step``,
  ``update``, ``optimizer_was_run = scale_before <= scale_after``, and the scheduler stepped
  only when the optimizer ran (a float32 run never overflows here: the scale grows every
  ``growth_interval=2`` steps);
- ``optimization.py``'s ``get_cosine_with_hard_restarts_schedule_with_warmup`` and
  ``get_polynomial_decay_schedule_with_warmup`` (``LambdaLR`` over ``functools.partial``);
  ``model.zero_grad()``.

The lines changed: the ``import`` lines and the gradient lines (``backward()`` returns the
gradients, summed over the accumulation steps and handed to the scaler and clipping).
"""

from __future__ import annotations

import functools
import random

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import assert_records_agree, initializer, params_of, runs_with_draws


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    rg.seed(0)


HF_INNER_LOOP_SOURCE = """
import torch
from torch import nn
from torch.optim.lr_scheduler import LambdaLR


def _get_cosine_with_hard_restarts_schedule_with_warmup_lr_lambda(
    current_step: int, *, num_warmup_steps: int, num_training_steps: int, num_cycles: int
):
    if current_step < num_warmup_steps:
        return float(current_step) / float(max(1, num_warmup_steps))
    progress = float(current_step - num_warmup_steps) / float(max(1, num_training_steps - num_warmup_steps))
    if progress >= 1.0:
        return 0.0
    return max(0.0, 0.5 * (1.0 + math.cos(math.pi * ((float(num_cycles) * progress) % 1.0))))


def get_cosine_with_hard_restarts_schedule_with_warmup(
    optimizer, num_warmup_steps: int, num_training_steps: int, num_cycles: int = 1, last_epoch: int = -1
):
    lr_lambda = functools.partial(
        _get_cosine_with_hard_restarts_schedule_with_warmup_lr_lambda,
        num_warmup_steps=num_warmup_steps,
        num_training_steps=num_training_steps,
        num_cycles=num_cycles,
    )
    return LambdaLR(optimizer, lr_lambda, last_epoch)


def _get_polynomial_decay_schedule_with_warmup_lr_lambda(
    current_step: int,
    *,
    num_warmup_steps: int,
    num_training_steps: int,
    lr_end: float,
    power: float,
    lr_init: int,
):
    if current_step < num_warmup_steps:
        return float(current_step) / float(max(1, num_warmup_steps))
    elif current_step > num_training_steps:
        return lr_end / lr_init  # as LambdaLR multiplies by lr_init
    else:
        lr_range = lr_init - lr_end
        decay_steps = num_training_steps - num_warmup_steps
        pct_remaining = 1 - (current_step - num_warmup_steps) / decay_steps
        decay = lr_range * pct_remaining**power + lr_end
        return decay / lr_init  # as LambdaLR multiplies by lr_init


def get_polynomial_decay_schedule_with_warmup(
    optimizer, num_warmup_steps, num_training_steps, lr_end=1e-7, power=1.0, last_epoch=-1
):
    lr_init = optimizer.defaults["lr"]
    if not (lr_init > lr_end):
        raise ValueError(f"lr_end ({lr_end}) must be smaller than initial lr ({lr_init})")

    lr_lambda = functools.partial(
        _get_polynomial_decay_schedule_with_warmup_lr_lambda,
        num_warmup_steps=num_warmup_steps,
        num_training_steps=num_training_steps,
        lr_end=lr_end,
        power=power,
        lr_init=lr_init,
    )
    return LambdaLR(optimizer, lr_lambda, last_epoch)


class SequenceClassifier(nn.Module):
    def __init__(self, vocab_size=20, hidden_size=12, num_labels=3):
        super().__init__()
        self.embeddings = nn.Embedding(vocab_size, hidden_size)
        self.LayerNorm = nn.LayerNorm(hidden_size, eps=1e-12)
        self.dense = nn.Linear(hidden_size, hidden_size)
        self.classifier = nn.Linear(hidden_size, num_labels)

    def forward(self, input_ids, attention_mask, labels=None):
        hidden = self.LayerNorm(self.embeddings(input_ids))
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        pooled = torch.tanh(self.dense((hidden * mask).sum(1) / mask.sum(1)))
        logits = self.classifier(pooled)
        loss = nn.functional.cross_entropy(logits, labels)
        return (loss, logits)


class Trainer:
    def __init__(self, model, args, train_dataloader):
        self.model = model
        self.args = args
        self.train_dataloader = train_dataloader
        self.scaler = torch.cuda.amp.GradScaler(init_scale=2.0 ** 16, growth_interval=2) if torch.cuda.is_available() else torch.amp.GradScaler("cpu", init_scale=2.0 ** 16, growth_interval=2)
        self.do_grad_scaling = True

    def compute_loss(self, model, inputs, return_outputs=False):
        outputs = model(**inputs)
        loss = outputs[0]
        return (loss, outputs) if return_outputs else loss

    def training_step(self, model, inputs):
        model.train()
        loss = self.compute_loss(model, inputs)
        if self.args.gradient_accumulation_steps > 1:
            loss = loss / self.args.gradient_accumulation_steps
        if self.do_grad_scaling:
            self.scaler.scale(loss).backward()
        else:
            loss.backward()
        return loss.detach()

    def train(self):
        args = self.args
        model = self.model
        decay_parameters = [n for n, _ in model.named_parameters() if "bias" not in n and "LayerNorm" not in n]
        self.optimizer = torch.optim.AdamW(
            [
                {"params": [p for n, p in model.named_parameters() if n in decay_parameters], "weight_decay": args.weight_decay},
                {"params": [p for n, p in model.named_parameters() if n not in decay_parameters], "weight_decay": 0.0},
            ],
            lr=args.learning_rate,
        )
        steps_in_epoch = len(self.train_dataloader)
        max_steps = math.ceil(args.num_train_epochs * steps_in_epoch / args.gradient_accumulation_steps)
        if args.lr_scheduler_type == "cosine_with_restarts":
            self.lr_scheduler = get_cosine_with_hard_restarts_schedule_with_warmup(self.optimizer, args.warmup_steps, max_steps, num_cycles=2)
        else:
            self.lr_scheduler = get_polynomial_decay_schedule_with_warmup(self.optimizer, args.warmup_steps, max_steps, lr_end=1e-5, power=2.0)
        tr_loss = torch.tensor(0.0).to(args.device)
        self._total_loss_scalar = 0.0
        self.global_step = 0
        model.zero_grad()
        for epoch in range(args.num_train_epochs):
            for step, inputs in enumerate(self.train_dataloader):
                tr_loss_step = self.training_step(model, inputs)
                tr_loss += tr_loss_step
                if (step + 1) % args.gradient_accumulation_steps == 0 or (
                    # last step in epoch but step is always smaller than gradient_accumulation_steps
                    steps_in_epoch <= args.gradient_accumulation_steps
                    and (step + 1) == steps_in_epoch
                ):
                    # Gradient clipping
                    if args.max_grad_norm is not None and args.max_grad_norm > 0:
                        if self.do_grad_scaling:
                            # AMP: gradients need unscaling
                            self.scaler.unscale_(self.optimizer)
                        nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm)

                    # Optimizer step
                    optimizer_was_run = True
                    if self.do_grad_scaling:
                        scale_before = self.scaler.get_scale()
                        self.scaler.step(self.optimizer)
                        self.scaler.update()
                        scale_after = self.scaler.get_scale()
                        optimizer_was_run = scale_before <= scale_after
                    else:
                        self.optimizer.step()

                    if optimizer_was_run:
                        self.lr_scheduler.step()

                    model.zero_grad()
                    self.global_step += 1
                    record.append([float(optimizer_was_run), self.scaler.get_scale(), self.lr_scheduler.get_last_lr()[0]])
                    record.append(params_of(model))
                    if self.global_step % args.logging_steps == 0:
                        tr_loss_scalar = tr_loss.item()
                        # reset tr_loss to zero
                        tr_loss -= tr_loss
                        self._total_loss_scalar += tr_loss_scalar
                        record.append(tr_loss_scalar / args.logging_steps)
        record.append(self._total_loss_scalar + tr_loss.item())


class Args:
    def __init__(self, **kwargs):
        self.__dict__.update(kwargs)


def batches(n, generator):
    out = []
    for _ in range(n):
        input_ids = torch.tensor(generator.integers(0, 20, size=(4, 6)))
        attention_mask = torch.tensor((np.arange(6)[None, :] < generator.integers(2, 7, size=(4, 1))).astype(np.int64))
        out.append({"input_ids": input_ids, "attention_mask": attention_mask, "labels": torch.tensor(generator.integers(0, 3, size=4))})
    return out


for schedule in ("cosine_with_restarts", "polynomial"):
    model = SequenceClassifier()
    initialize(model)
    args = Args(device="cpu", learning_rate=1e-2, weight_decay=0.01, num_train_epochs=3, gradient_accumulation_steps=3,
                warmup_steps=2, max_grad_norm=1.0, logging_steps=2, lr_scheduler_type=schedule)
    trainer = Trainer(model, args, batches(7, np.random.default_rng(5)))
    trainer.train()
"""

HF_INNER_LOOP_STEPS = [
    (
        "import torch\nfrom torch import nn\n",
        "import retrograd as torch\nfrom retrograd import nn\n",
    ),
    (
        "            self.scaler.scale(loss).backward()\n",
        "            grads = self.scaler.scale(loss).backward()\n"
        "            self.grads = grads if getattr(self, 'grads', None) is None else self.grads + grads\n",
    ),
    ("self.scaler.unscale_(self.optimizer)", "self.scaler.unscale_(self.optimizer, self.grads)"),
    (
        "nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm)",
        "nn.utils.clip_grad_norm_(self.grads, model.parameters(), args.max_grad_norm)",
    ),
    (
        "                        self.scaler.step(self.optimizer)\n",
        "                        self.scaler.step(self.optimizer, self.grads)\n",
    ),
    (
        "                    model.zero_grad()\n                    self.global_step += 1\n",
        "                    model.zero_grad()\n                    self.grads = None\n                    self.global_step += 1\n",
    ),
]


def test_hugging_face_inner_loop_with_accumulation_and_skipped_amp_steps_trains_as_torch(capsys):
    (theirs, ours), _ = runs_with_draws(
        HF_INNER_LOOP_SOURCE, HF_INNER_LOOP_STEPS, capsys, 21601, initialize=initializer(),
        params_of=params_of, functools=functools,
    )  # fmt: skip
    steps = [r for r in theirs if isinstance(r, list)]
    assert [scale for _, scale, _ in steps[:5]] == [2.0**16, 2.0**17, 2.0**17, 2.0**18, 2.0**18]
    assert_records_agree(ours, theirs, rtol=2e-4, atol=1e-5)
