"""Real ports, continued (the harness: ``tests/real_ports.py``): reference-free preference
tuning written here in the style of huggingface/trl's ORPO and CPO trainers, run on torch and,
ported, on retrograd from the same weights and batches.

The program trains a toy causal LM (``F.scaled_dot_product_attention`` under a float mask bias
built with ``masked_fill`` and ``torch.finfo(torch.float32).min``) whose input embeddings are
frozen and whose layers run under the reentrant ``torch.utils.checkpoint.checkpoint``, made
trainable by a forward hook on the embedding calling ``output.requires_grad_(True)``
(transformers' ``enable_input_require_grads``). One model takes an ``AdamW`` step under each
loss in turn: the odds-ratio loss (``torch.log1p(-torch.exp(logps))``,
``torch.log(F.sigmoid(...))``) plus the chosen rows' NLL through ``nn.CrossEntropyLoss``'s
``-100`` labels, and the contrastive ``sigmoid`` (label-smoothed), ``hinge``, ``ipo`` and
``simpo`` losses with or without the NLL (a ``torch.tensor(0.0)`` stand-in when its weight is
0). Also exercised: padding by ``value * torch.ones(*shape, dtype=...)``, ``labels[labels ==
-100] = 0`` before a ``gather`` of ``log_softmax``, per-token means over a boolean mask, and
metrics through ``.detach().mean().cpu()``, ``(a > b).float()`` and ``.item()``.

The original port exposed no defect of its own (it passed when added); the file guards that
this surface trains as torch does. The lines changed: the ``import`` lines and the gradient
line (``grads = loss.backward()`` given to ``optimizer.step``).
"""

from __future__ import annotations

import numpy as np
import torch

from real_ports import assert_records_agree, initializer, params_of, runs_with_draws

PREFERENCE_SOURCE = """
# Preference tuning without a reference model, on a toy decoder.
import collections

import torch
import torch.nn as nn
import torch.utils.checkpoint
from torch.nn import functional as F

IGNORE = -100


class DecoderLayer(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.pre_attn = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width, bias=False)
        self.mix = nn.Linear(width, width)
        self.pre_ff = nn.LayerNorm(width)
        self.ff = nn.Sequential(nn.Linear(width, 2 * width), nn.GELU(), nn.Linear(2 * width, width))

    def forward(self, h, bias):
        b, t, w = h.shape
        split = lambda z: z.view(b, t, self.heads, w // self.heads).transpose(1, 2)
        q, k, v = map(split, self.qkv(self.pre_attn(h)).chunk(3, dim=-1))
        att = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
        h = h + self.mix(att.transpose(1, 2).reshape(b, t, w))
        return h + self.ff(self.pre_ff(h))


class ToyLM(nn.Module):
    def __init__(self, vocab=12, width=8, heads=2, depth=2, max_len=10):
        super().__init__()
        self.tok = nn.Embedding(vocab, width)
        self.pos = nn.Parameter(torch.zeros(max_len, width))
        self.layers = nn.ModuleList(DecoderLayer(width, heads) for _ in range(depth))
        self.final_norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)
        self.checkpointing = False

    def input_embeddings(self):
        return self.tok

    def make_inputs_trainable(self):
        # frozen embeddings would hand the reentrant checkpoints inputs without grad
        def mark(module, args, output):
            output.requires_grad_(True)

        self._mark_hook = self.input_embeddings().register_forward_hook(mark)

    def forward(self, ids, mask):
        b, t = ids.shape
        keep = torch.ones(t, t, dtype=torch.bool).tril()[None, None] & mask[:, None, None, :].bool()
        bias = torch.zeros(b, 1, t, t).masked_fill(~keep, torch.finfo(torch.float32).min)
        h = self.tok(ids) + self.pos[:t]
        for layer in self.layers:
            if self.checkpointing and self.training:
                h = torch.utils.checkpoint.checkpoint(layer, h, bias, use_reentrant=True)
            else:
                h = layer(h, bias)
        return self.head(self.final_norm(h))


def right_pad(x, length, value):
    missing = length - x.size(-1)
    if missing <= 0:
        return x
    return torch.cat([x, value * torch.ones(*x.shape[:-1], missing, dtype=x.dtype)], dim=-1)


def stack_pairs(batch):
    # chosen rows first, then rejected ones, right-padded to one length
    longest = max(batch["chosen_ids"].shape[1], batch["rejected_ids"].shape[1])
    joined = {}
    for name, fill in (("ids", 0), ("mask", 0), ("labels", IGNORE)):
        sides = [batch["chosen_" + name], batch["rejected_" + name]]
        rows = [right_pad(x, longest, fill) for x in sides]
        joined[name] = torch.cat(rows, dim=0)
    return joined


def sequence_logps(logits, labels, per_token_mean):
    labels, logits = labels[:, 1:].clone(), logits[:, :-1, :]
    counted = labels != IGNORE
    labels[labels == IGNORE] = 0  # any valid index; these positions are masked out
    token = torch.gather(logits.log_softmax(-1), dim=2, index=labels.unsqueeze(2)).squeeze(2)
    total = (token * counted).sum(-1)
    return total / counted.sum(-1) if per_token_mean else total


def odds_ratio(good, bad):
    log_odds = (good - bad) - (torch.log1p(-torch.exp(good)) - torch.log1p(-torch.exp(bad)))
    return torch.log(F.sigmoid(log_odds)), log_odds


def contrastive(cfg, good, bad):
    z = good - bad
    if cfg.loss == "hinge":
        return torch.relu(1 - cfg.beta * z)
    if cfg.loss == "ipo":
        return (z - 1 / (2 * cfg.beta)) ** 2
    if cfg.loss == "simpo":
        z = z - cfg.margin / cfg.beta
    elif cfg.loss != "sigmoid":
        raise ValueError(f"unknown loss {cfg.loss!r}")
    agree, disagree = F.logsigmoid(cfg.beta * z), F.logsigmoid(-cfg.beta * z)
    return -(1 - cfg.smoothing) * agree - cfg.smoothing * disagree


class Tuner:
    def __init__(self, model, cfg):
        self.model, self.cfg = model, cfg
        trainable = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(trainable, lr=cfg.lr)
        self.history = collections.defaultdict(list)

    def chosen_nll(self, logits, labels):
        if self.cfg.nll_weight == 0:
            return torch.tensor(0.0)
        flat = logits[:, :-1, :].contiguous()
        targets = labels[:, 1:].contiguous().view(-1)
        return nn.CrossEntropyLoss()(flat.view(-1, flat.shape[-1]), targets)

    def step(self, batch):
        cfg = self.cfg
        self.model.train()
        both = stack_pairs(batch)
        n = batch["chosen_ids"].shape[0]
        logits = self.model(both["ids"], both["mask"])
        nll = self.chosen_nll(logits[:n], both["labels"][:n])
        logps = sequence_logps(logits, both["labels"], cfg.loss in ("orpo", "ipo", "simpo"))
        good, bad = logps[:n], logps[n:]
        if cfg.loss == "orpo":
            ratio, log_odds = odds_ratio(good, bad)
            loss = cfg.nll_weight * nll - cfg.beta * ratio.mean()
            self.history["log_odds"].append(log_odds.detach().mean().item())
        else:
            loss = contrastive(cfg, good, bad).mean() + cfg.nll_weight * nll
        reward_good, reward_bad = cfg.beta * good.detach(), cfg.beta * bad.detach()
        metrics = {
            "accuracy": (reward_good > reward_bad).float().mean().cpu(),
            "margin": (reward_good - reward_bad).mean().cpu(),
            "logits": logits.detach().mean().cpu(),
            "nll": nll.detach().mean().cpu(),
        }
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        for name, value in metrics.items():
            self.history[name].append(value.item())
        return loss.detach()
"""

TRAIN_SOURCE = """
import types

lm = ToyLM()
initialize(lm)
lm.input_embeddings().requires_grad_(False)
lm.make_inputs_trainable()
lm.checkpointing = True
record.append([name for name, p in lm.named_parameters() if p.requires_grad])
# one model tuned a step under each loss in turn, each with a fresh optimizer
for i, (loss_name, beta, smoothing, nll_weight) in enumerate(settings):
    cfg = types.SimpleNamespace(
        loss=loss_name, beta=beta, smoothing=smoothing, margin=0.5, nll_weight=nll_weight, lr=2e-2
    )
    raw = batches[i % len(batches)]
    tuner = Tuner(lm, cfg)
    record.append(tuner.step({k: torch.tensor(v) for k, v in raw.items()}).item())
    record.append({k: np.array(v) for k, v in tuner.history.items()})
record.append(params_of(lm))
"""

STEPS = [
    ("import torch\nimport torch.nn as nn\nimport torch.utils.checkpoint\n",
     "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.utils.checkpoint\n"),
    ("        loss.backward()\n        self.optimizer.step()\n",
     "        grads = loss.backward()\n        self.optimizer.step(grads)\n"),
]  # fmt: skip

SETTINGS = [  # (loss, beta, label smoothing, NLL weight)
    ("orpo", 0.1, 0.0, 1.0),
    ("sigmoid", 0.1, 0.1, 1.0),
    ("hinge", 0.5, 0.0, 0.5),
    ("ipo", 0.1, 0.0, 1.0),
    ("simpo", 2.0, 0.0, 0.0),
]


def preference_pairs(rng, steps=2):
    """Two prompt + response rows per side: the prompt's labels -100, the second row
    right-padded (id 0, mask 0, label -100), the rejected side shorter than the chosen."""
    batches = []
    for _ in range(steps):
        raw = {}
        for side, width in (("chosen", 7), ("rejected", 5)):
            ids = rng.integers(1, 12, (2, width))
            mask = np.ones_like(ids)
            labels = ids.copy()
            labels[:, :2] = -100
            ids[1, -1], mask[1, -1], labels[1, -1] = 0, 0, -100
            raw[f"{side}_ids"], raw[f"{side}_mask"] = ids.tolist(), mask.tolist()
            raw[f"{side}_labels"] = labels.tolist()
        batches.append(raw)
    return batches


def test_orpo_and_cpo_style_losses_train_through_reentrant_checkpoints_as_torch(capsys):
    torch.manual_seed(0)
    batches = preference_pairs(np.random.default_rng(24501))
    (theirs, ours), _ = runs_with_draws(
        PREFERENCE_SOURCE + TRAIN_SOURCE, STEPS, capsys, 24501, batches=batches,
        settings=SETTINGS, initialize=initializer(), params_of=params_of,
    )  # fmt: skip
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)
