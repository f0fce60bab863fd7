"""More loops of ``test_budget_soak_25.py`` (its harness and checks; split to keep each file
short in CI): accumulation over micro-batches, hooks that keep tensors, evaluation under
``no_grad`` between training steps, ``utils.checkpoint`` and attention over padded lengths."""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg
from test_budget_soak_25 import STEPS, Context, _param_grads, check_loop

nn = rg.nn
F = rg.nn.functional


def accumulated_micro_batches(ctx: Context, rng) -> None:
    """Gradients accumulated over 1-3 micro-batches of varying size, then one update."""
    model = nn.Sequential(nn.Linear(7, 20), nn.ReLU(), nn.LayerNorm(20), nn.Linear(20, 4))
    opt = rg.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(STEPS):
        total, losses = None, []
        for size in rng.integers(2, 9, int(rng.integers(1, 4))):
            x = rg.tensor(rng.standard_normal((int(size), 7)).astype(np.float32))
            y = rg.tensor(rng.integers(0, 4, int(size)))
            loss = F.cross_entropy(model(x), y) / 3
            grads = ctx.grads(loss.backward())
            total = grads if total is None else total + grads
            losses.append(loss)
        opt.step(total)
        ctx.step(losses=losses, grads=_param_grads(total, model))


def hooks_that_keep_tensors(ctx: Context, rng) -> None:
    """A forward hook keeps each layer's output (tracked, as users write it, until the next
    step overwrites it) and a tensor hook keeps the gradient of a hidden value."""
    model = nn.Sequential(
        nn.Linear(9, 18), nn.ELU(), nn.Linear(18, 18), nn.Tanh(), nn.Linear(18, 2)
    )
    kept: dict[str, rg.Tensor] = {}
    for name, module in model.named_children():
        module.register_forward_hook(lambda m, args, out, name=name: kept.__setitem__(name, out))
    opt = rg.optim.SGD(model.parameters(), lr=0.05)
    for _ in range(STEPS):
        x = rg.tensor(rng.standard_normal((6, 9)).astype(np.float32))
        out = model(x)
        seen: list = []
        kept["1"].register_hook(seen.append)
        loss = (out**2).mean()
        grads = ctx.grads(loss.backward())
        opt.step(grads)
        ctx.step(loss=loss, hidden=kept["3"], seen=seen, grads=_param_grads(grads, model))


def eval_under_no_grad_between(ctx: Context, rng) -> None:
    """A net with dropout and BatchNorm, evaluated in eval() under no_grad after each
    training step (and its validation batch half the size)."""
    model = nn.Sequential(
        nn.Linear(5, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Dropout(0.2), nn.Linear(16, 2)
    )
    opt = rg.optim.SGD(model.parameters(), lr=0.05, momentum=0.5)
    for _ in range(STEPS):
        model.train()
        x = rg.tensor(rng.standard_normal((14, 5)).astype(np.float32))
        y = rg.tensor(rng.integers(0, 2, 14))
        loss = F.cross_entropy(model(x), y)
        grads = ctx.grads(loss.backward())
        opt.step(grads)
        model.eval()
        with rg.no_grad():
            val = F.cross_entropy(model(x[:7]), y[:7])
        ctx.step(loss=loss, val=val, grads=_param_grads(grads, model))


def utils_checkpoint_blocks(ctx: Context, rng) -> None:
    """Residual blocks each run through ``utils.checkpoint`` inside the budget."""
    blocks = nn.ModuleList(
        [nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 16)) for _ in range(3)]
    )
    params = list(blocks.parameters())
    opt = rg.optim.SGD(params, lr=0.02)
    for _ in range(STEPS):
        h = rg.tensor(rng.standard_normal((8, 16)).astype(np.float32))
        for block in blocks:
            h = h + rg.utils.checkpoint.checkpoint(block, h, use_reentrant=False)
        loss = (h**2).mean()
        grads = ctx.grads(loss.backward())
        opt.step(grads)
        ctx.step(loss=loss, grads=[p.grad(grads) for p in params])


def masked_attention_padded_lengths(ctx: Context, rng) -> None:
    """Attention written out over a padded batch: the sequence length and each row's
    padding drawn per step, the mask built from NumPy; functional leaves made each step from
    arrays a manual SGD updates."""
    d = 8
    arrays = [(rng.standard_normal((d, d)) / d**0.5).astype(np.float32) for _ in range(4)]
    for _ in range(STEPS):
        length = int(rng.integers(4, 9))
        ws = [rg.tensor(a).require_grad() for a in arrays]
        x = rg.tensor(rng.standard_normal((3, length, d)).astype(np.float32))
        lengths = rng.integers(1, length + 1, 3)
        pad = rg.tensor(np.arange(length)[None, None, :] >= lengths[:, None, None])
        q, k, v = (x @ w for w in ws[:3])
        scores = (q @ k.transpose(1, 2) / d**0.5).masked_fill(pad, float("-inf"))
        out = scores.softmax(-1) @ v @ ws[3]
        loss = (out + x).pow(2).mean()
        grads = ctx.grads(loss.backward())
        for a, w in zip(arrays, ws):
            a -= 0.05 * w.grad(grads).numpy()
        ctx.step(loss=loss, grads=[w.grad(grads) for w in ws])


LOOPS = [
    accumulated_micro_batches,
    hooks_that_keep_tensors,
    eval_under_no_grad_between,
    utils_checkpoint_blocks,
    masked_attention_padded_lengths,
]


@pytest.mark.parametrize("loop", LOOPS, ids=[loop.__name__ for loop in LOOPS])
def test_a_budget_holds_in_a_loop_that_builds_its_input_each_step(loop):
    check_loop(loop)
