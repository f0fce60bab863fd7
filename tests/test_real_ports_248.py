"""Real ports, continued (the harness: ``tests/real_ports.py``): a program written here in the
style of FasterDecoding/Medusa (extra decoding heads trained on a frozen causal LM, the
repository's legacy model and trainer): the heads trained a few steps against torch's run of
the same code from the same weights, then asked for their top-k candidates.

What it exercises: the base model run under ``torch.inference_mode()`` and its hidden states
``clone()``-d outside it to train the heads on; ``nn.Sequential(*([SkipBlock(width)] * depth),
...)`` holding one block several times (its parameters counted once); ``torch.nn.init.zeros_``
of the identity-initialised blocks; ``.to(dtype).to(device)`` of a ``ModuleList`` and
``weight.data[:] = ...`` copies of the LM head; a ``TransformerEncoderLayer`` (``batch_first``,
``norm_first``) under ``nn.Transformer.generate_square_subsequent_mask`` with ``is_causal=True``;
``torch.stack`` of the heads' logits; head ``i``'s shifted loss ``logits[i, :, : -(2 + i)]``
against ``labels[..., 2 + i :]`` with ``-100`` ignored by ``nn.CrossEntropyLoss``, ``loss = 0``
then ``+=``, and its top-k accuracy (``topk[keep]``, ``topk.eq(...).any(-1)``); AdamW over
the parameters that ``requires_grad``; the candidates by ``argmax().item()`` and
``topk(2).indices.tolist()``.

The lines changed: the ``import`` lines and the gradient lines (``grads = loss.backward()``
given to ``optimizer.step``).
"""

from __future__ import annotations

import numpy as np

from real_ports import (
    assert_records_agree,
    initializer,
    params_of,
    runs_with_draws,
    seeded_draws,  # noqa: F401 (autouse: each test from fixed seeds)
)

MEDUSA_SOURCE = """
import torch
from torch import nn

IGNORED = -100


class SkipBlock(nn.Module):
    # x + silu(W x + b), with W = 0 at the start: each head begins as the LM head itself
    def __init__(self, width):
        super().__init__()
        self.proj = nn.Linear(width, width)
        torch.nn.init.zeros_(self.proj.weight)
        self.act = nn.SiLU()

    def forward(self, x):
        return x + self.act(self.proj(x))


class ToyCausalLM(nn.Module):
    # laid out as a transformers causal LM: .model returns a tuple, .lm_head maps to the vocab
    class Trunk(nn.Module):
        def __init__(self, vocab, width):
            super().__init__()
            self.embed_tokens = nn.Embedding(vocab, width)
            self.block = nn.TransformerEncoderLayer(
                width, nhead=2, dim_feedforward=2 * width, dropout=0.0,
                batch_first=True, norm_first=True,
            )
            self.norm = nn.LayerNorm(width)

        def forward(self, input_ids=None, attention_mask=None, position_ids=None):
            mask = nn.Transformer.generate_square_subsequent_mask(input_ids.shape[1])
            h = self.block(self.embed_tokens(input_ids), src_mask=mask, is_causal=True)
            return (self.norm(h),)

    def __init__(self, vocab, width):
        super().__init__()
        self.model = self.Trunk(vocab, width)
        self.lm_head = nn.Linear(width, vocab, bias=False)


class DraftHeads(nn.Module):
    # head i guesses the token i + 2 places ahead from the frozen model's last hidden state
    def __init__(self, base, heads=3, depth=1):
        super().__init__()
        self.base = base
        self.n_heads = heads
        vocab, width = base.lm_head.weight.shape
        self.heads = nn.ModuleList(
            nn.Sequential(*([SkipBlock(width)] * depth), nn.Linear(width, vocab, bias=False))
            for _ in range(heads)
        )
        lm_weight = base.lm_head.weight
        self.heads.to(lm_weight.dtype).to(lm_weight.device)
        for head in self.heads:
            head[-1].weight.data[:] = lm_weight.data[:]

    def forward(self, input_ids=None, attention_mask=None, with_base_logits=False):
        with torch.inference_mode():
            hidden = self.base.model(input_ids=input_ids, attention_mask=attention_mask)[0]
            if with_base_logits:
                base_logits = self.base.lm_head(hidden)
        hidden = hidden.clone()  # an inference tensor cannot enter autograd
        logits = torch.stack([head(hidden) for head in self.heads], dim=0)
        return (logits, base_logits) if with_base_logits else logits


class HeadTrainer:
    def __init__(self, model, lr):
        self.model = model
        trainable = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(trainable, lr=lr)
        self.history = []

    def loss_and_metrics(self, model, batch):
        n_heads = model.module.n_heads if hasattr(model, "module") else model.n_heads
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
        criterion = nn.CrossEntropyLoss()
        total, metrics = 0, {}
        for i in range(n_heads):
            guesses = logits[i, :, : -(2 + i)].contiguous().view(-1, logits.shape[-1])
            truth = batch["labels"][..., 2 + i :].contiguous().view(-1).to(guesses.device)
            head_loss = criterion(guesses, truth)
            total += head_loss
            metrics[f"head{i}_loss"] = head_loss.item()
            keep = truth.ne(IGNORED)
            for k in (1, 3):
                _, best = guesses.topk(k, dim=-1)
                hit = best[keep].eq(truth[keep].unsqueeze(-1)).any(-1)
                metrics[f"head{i}_top{k}"] = hit.float().mean().item()
        self.history.append(metrics)
        return total

    def step(self, batch):
        self.model.train()
        loss = self.loss_and_metrics(self.model, batch)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return loss.detach()


base = ToyCausalLM(vocab=11, width=16)
initialize(base)
base.requires_grad_(False)
drafts = DraftHeads(base, heads=3, depth=2)
initialize(drafts.heads)
record.append([name for name, p in drafts.named_parameters() if p.requires_grad])
record.append(sum(p.numel() for p in drafts.heads.parameters()))
trainer = HeadTrainer(drafts, lr=2e-2)
for rows in batches:
    ids = torch.tensor(rows)
    labels = ids.clone()
    labels[:, :2] = IGNORED  # the prompt is not predicted
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}
    loss = trainer.step(batch)
    record.append(loss.item())
    record.append(params_of(drafts.heads))
record.append(dict(trainer.history[-1]))

drafts.eval()
with torch.no_grad():
    logits, base_logits = drafts(input_ids=torch.tensor(batches[0][:1]), with_base_logits=True)
    # a speculative step's candidates: the base model's next token, then each head's top 2
    proposal = [base_logits[0, -1].argmax().item()]
    proposal += [logits[i, 0, -1].topk(2).indices.tolist() for i in range(drafts.n_heads)]
    record.append(str(proposal))
    record.append(base_logits.numpy())
"""

STEPS = [
    ("\nimport torch\n", "\nimport retrograd as torch\n"),  # (and `from torch import nn`)
    ("        loss.backward()\n        self.optimizer.step()\n",
     "        grads = loss.backward()\n        self.optimizer.step(grads)\n"),
]  # fmt: skip


def test_medusa_heads_train_on_a_frozen_base_under_inference_mode_as_torch(capsys):
    rng = np.random.default_rng(24801)
    batches = rng.integers(0, 11, (3, 2, 9)).tolist()
    (theirs, ours), _ = runs_with_draws(
        MEDUSA_SOURCE, STEPS, capsys, 24801, batches=batches,
        initialize=initializer(), params_of=params_of,
    )  # fmt: skip
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)
