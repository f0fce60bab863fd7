"""Real-port tests, continued (the harness: ``tests/real_ports.py``): training utilities
users write on torch's base classes, as one program written here in the style of PyTorch's
"Extending PyTorch" note, huggingface/transformers, jeonsworld/ViT-pytorch and
maskrcnn-benchmark, one small training run checked against torch's run of the same code:

- a linear ``autograd.Function`` (``ctx.save_for_backward(x, w, b)`` with ``b`` possibly
  ``None``, ``out += b.unsqueeze(0).expand_as(out)``, a backward computing only what
  ``ctx.needs_input_grad[i]`` asks for; the tuples each backward saw are recorded) and its
  module (``self.register_parameter('bias', None)``, ``extra_repr``); a sorting ``Function``
  with ``ctx.mark_non_differentiable(idx)``, a backward taking both output gradients and
  returning ``torch.zeros_like(x).index_add_(0, idx, g)``, its index output reused to gather;
- ``torch.utils.checkpoint.checkpoint(block, x, use_reentrant=...)`` in a model's forward
  when ``self.gradient_checkpointing and self.training``, reentrant and not;
- a ``LambdaLR`` subclass passing its own bound method as the lambda (warm-up then cosine),
  and an ``_LRScheduler`` subclass whose ``get_lr`` reads ``self.last_epoch`` and
  ``self.base_lrs`` with ``bisect_right`` of milestones (linear and constant warm-up);
  gradient accumulation (ported as a sum of ``Gradients``) with ``clip_grad_norm_`` and
  ``scheduler.step()`` before ``optimizer.step()``;
- an EMA by ``swa_utils.AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.9))``
  evaluated after ``swa_utils.update_bn(loader, ema)``.
"""

from __future__ import annotations

import types

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import (
    assert_records_agree,
    initializer,
    params_of,
    port,
    run_source,
    seeded_draws,  # noqa: F401 (autouse: each test from fixed seeds)
)

EXTENDING_SOURCE = """
import math
import bisect

import torch
from torch.autograd import Function as Op
from torch.optim.lr_scheduler import LambdaLR as Multiplied
from torch.optim.swa_utils import AveragedModel, update_bn, get_ema_multi_avg_fn
from torch.utils.checkpoint import checkpoint as recompute

asked = []  # the needs_input_grad of every backward


class AffineFunction(Op):
    @staticmethod
    def forward(ctx, x, w, b=None):
        ctx.save_for_backward(x, w, b)
        out = x.mm(w.t())
        if b is not None:
            out += b.unsqueeze(0).expand_as(out)
        return out

    @staticmethod
    def backward(ctx, g):
        x, w, b = ctx.saved_tensors
        asked.append(tuple(ctx.needs_input_grad))
        dx = g.mm(w) if ctx.needs_input_grad[0] else None  # only what is asked for
        dw = g.t().mm(x) if ctx.needs_input_grad[1] else None
        db = g.sum(0) if b is not None and ctx.needs_input_grad[2] else None
        return dx, dw, db


class Affine(nn.Module):
    def __init__(self, n_in, n_out, bias=True):
        super().__init__()
        self.n_in, self.n_out = n_in, n_out
        self.weight = nn.Parameter(torch.empty(n_out, n_in))
        if bias:
            self.bias = nn.Parameter(torch.empty(n_out))
        else:
            self.register_parameter('bias', None)  # registered, though absent
        for p in (self.weight, self.bias):
            if p is not None:
                nn.init.uniform_(p, -0.1, 0.1)

    def forward(self, x):
        return AffineFunction.apply(x, self.weight, self.bias)

    def extra_repr(self):
        return f'n_in={self.n_in}, n_out={self.n_out}, bias={self.bias is not None}'


class SortWithIndex(Op):
    @staticmethod
    def forward(ctx, x):
        values, order = x.sort()
        ctx.mark_non_differentiable(order)
        ctx.save_for_backward(x, order)
        return values, order

    @staticmethod
    def backward(ctx, g_values, g_order):  # (one gradient per output, even the index's)
        x, order = ctx.saved_tensors
        return torch.zeros_like(x).index_add_(0, order, g_values)


class WarmupCosine(Multiplied):
    # linear warm-up to the base rate, then half a cosine down to zero
    def __init__(self, optimizer, warmup, total, last_epoch=-1):
        self.warmup, self.total = warmup, total
        super().__init__(optimizer, self.factor, last_epoch=last_epoch)

    def factor(self, step):
        if step < self.warmup:
            return float(step) / float(max(1.0, self.warmup))
        done = float(step - self.warmup) / float(max(1, self.total - self.warmup))
        return max(0.0, 0.5 * (1.0 + math.cos(math.pi * done)))


class WarmupSteps(torch.optim.lr_scheduler._LRScheduler):
    # the rate times gamma at each milestone passed, ramped (or held) low for `warmup` steps
    def __init__(self, optimizer, milestones, gamma=0.1, start=1.0 / 3, warmup=500, method='linear',
                 last_epoch=-1):
        if list(milestones) != sorted(milestones) or method not in ('constant', 'linear'):
            raise ValueError(f'milestones {milestones} must increase; method {method!r}')
        self.milestones, self.gamma, self.start = milestones, gamma, start
        self.warmup, self.method = warmup, method
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        factor = 1
        if self.last_epoch < self.warmup:
            t = float(self.last_epoch) / self.warmup
            factor = self.start if self.method == 'constant' else self.start * (1 - t) + t
        decay = self.gamma ** bisect.bisect_right(self.milestones, self.last_epoch)
        return [base * factor * decay for base in self.base_lrs]


class Residual(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.fc, self.norm = Affine(width, width), nn.BatchNorm1d(width)

    def forward(self, x):
        return torch.tanh(self.norm(self.fc(x))) + x


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem, self.head = Affine(5, 6), Affine(6, 3, bias=False)
        self.blocks = nn.ModuleList([Residual(6) for _ in range(2)])
        self.scale = nn.Parameter(torch.linspace(-1.0, 1.0, steps=6))
        self.gradient_checkpointing = True  # (a flag models carry)

    def forward(self, x):
        x = self.stem(x)
        for block in self.blocks:
            # recomputed in the backward rather than kept, as large models do in training
            if self.training and self.gradient_checkpointing:
                x = recompute(block, x, use_reentrant=args.use_reentrant)
            else:
                x = block(x)
        values, order = SortWithIndex.apply(self.scale)
        return self.head(x * values + x[:, order] * 0.5)


model = Net()
initialize(model)
record.append(repr(model.head))  # the extra_repr
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
if args.scheduler == 'cosine':
    scheduler = WarmupCosine(optimizer, warmup=2, total=6)
else:
    scheduler = WarmupSteps(optimizer, milestones=[3, 5], gamma=0.5, start=0.25, warmup=2,
                            method=args.warmup_method)
averaged = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.9))
criterion = nn.CrossEntropyLoss()
accumulate, updates = 2, 0
model.zero_grad()
while updates < 6:
    model.train()
    for i, (x, y) in enumerate(data):
        loss = criterion(model(x), y) / accumulate
        loss.backward()
        if (i + 1) % accumulate:
            continue
        record.append(loss.item() * accumulate)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scheduler.step()  # (before the optimizer, as some training scripts have it)
        optimizer.step()
        optimizer.zero_grad()
        updates += 1
        averaged.update_parameters(model)
        record.extend([params_of(model), scheduler.get_last_lr()])
        if updates == 6:
            break

record.append(sorted(set(asked)))
update_bn([x for x, _ in data], averaged)
averaged.eval()
with torch.no_grad():
    record.append(criterion(averaged(data[0][0]), data[0][1]).item())
record.append(params_of(averaged))
record.append({k: v.numpy().copy() for k, v in averaged.state_dict().items() if 'running' in k})
"""

EXTENDING_STEPS = [
    ("\nimport torch\n", "\nimport retrograd as torch\n"),
    ("model.zero_grad()\nwhile", "model.zero_grad()\ngrads = None\nwhile"),
    (
        "        loss.backward()\n",
        "        g = loss.backward()\n        grads = g if grads is None else grads + g\n",
    ),
    ("clip_grad_norm_(model.parameters(),", "clip_grad_norm_(grads, model.parameters(),"),
    (
        "        optimizer.step()\n        optimizer.zero_grad()\n",
        "        optimizer.step(grads)\n        grads = None\n",
    ),
]


@pytest.mark.parametrize(
    ("use_reentrant", "scheduler", "warmup_method"),
    [(True, "cosine", None), (False, "multistep", "linear"), (False, "multistep", "constant")],
)
def test_extending_pytorch_trains_as_torch(use_reentrant, scheduler, warmup_method):
    rng = np.random.default_rng(8601)
    batches = [
        (rng.standard_normal((6, 5)).astype(np.float32), rng.integers(0, 3, 6)) for _ in range(4)
    ]
    args = types.SimpleNamespace(
        use_reentrant=use_reentrant, scheduler=scheduler, warmup_method=warmup_method
    )
    initialize = initializer()
    records = []
    for lib in (torch, rg):
        record = []
        text = (
            EXTENDING_SOURCE
            if lib is torch
            else port(EXTENDING_SOURCE, EXTENDING_STEPS).replace("from torch.", "from retrograd.")
        )
        data = [(lib.tensor(x), lib.tensor(y)) for x, y in batches]
        run_source(
            text, lib, record=record, data=data, args=args, initialize=initialize,
            params_of=params_of,
        )  # fmt: skip
        records.append(record)
    theirs, ours = records
    assert len(theirs) == 1 + 6 * 3 + 4
    assert theirs[0] == "Affine(n_in=6, n_out=3, bias=False)"
    # the stem's input needs no gradient; the blocks' inputs do; the head has no bias
    assert theirs[-4] == [(False, True, True), (True, True, False), (True, True, True)]
    assert_records_agree(ours, theirs, rtol=1e-5, atol=1e-6)


def test_reentrant_checkpoint_of_inputs_needing_no_gradient_is_torchs():
    """With ``use_reentrant=True`` (also its default) torch's ``checkpoint`` of inputs none of
    which requires a gradient gives an output that requires none, with a warning: the first
    block of a model checkpointed on its data gets no gradient for its parameters (what
    transformers' ``enable_input_require_grads`` works around). retrograd's let the gradient
    through. Keyword arguments are refused with torch's ``ValueError``."""
    for lib in (torch, rg):
        linear = lib.nn.Linear(2, 2)
        x = lib.ones(1, 2)
        with pytest.warns(UserWarning, match="None of the inputs have requires_grad=True"):
            out = lib.utils.checkpoint.checkpoint(linear, x, use_reentrant=True)
        assert not out.requires_grad
        with pytest.warns(UserWarning, match="None of the inputs have requires_grad=True"):
            assert not lib.utils.checkpoint.checkpoint(linear, x).requires_grad
        assert lib.utils.checkpoint.checkpoint(linear, x, use_reentrant=False).requires_grad
        wanting = lib.ones(1, 2, requires_grad=True)
        assert lib.utils.checkpoint.checkpoint(linear, wanting, use_reentrant=True).requires_grad
        with pytest.raises(ValueError, match="Unexpected keyword arguments: scale"):
            lib.utils.checkpoint.checkpoint(
                lambda a, scale: a * scale, wanting, scale=2.0, use_reentrant=True
            )
