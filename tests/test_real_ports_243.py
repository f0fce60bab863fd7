"""Real ports, continued (the harness: ``tests/real_ports.py``): a program written here in the
style of huggingface/trl's GRPO trainer and transformers' sampling loop, trained a few steps
over a tiny left-padded causal LM against torch's run of the same program from the same weights
and uniform draws.

Surface: sampling with position ids from ``mask.long().cumsum(-1) - 1`` and
``masked_fill_(mask == 0, 1)``; a repetition penalty by ``torch.gather``, ``torch.where(s < 0, s
* p, s / p)`` and ``scores.scatter``; temperature; top-k by ``torch.topk(s, k)[0][..., -1,
None]`` and ``masked_fill``; an inverse-CDF draw over ``torch.rand``; finished rows padded and
tracked by ``alive & ~(tok == eos)``; an attention bias of ``torch.finfo(dtype).min``. Then
GRPO: prompts ``repeat_interleave``d per group, the completion mask after the first EOS from
``is_eos.int().argmax(dim=1)[is_eos.any(dim=1)]`` written into a ``torch.full`` through a
boolean index, reference log-probs under ``torch.inference_mode()`` from a ``deepcopy`` frozen
by ``requires_grad = False``, several rewards weighted and summed, grouped advantages by
``view(-1, G).mean/std`` and ``repeat_interleave``, per-token log-probs as gathered logits minus
``torch.stack([torch.logsumexp(row, dim=-1) for row in logits])``, the k3 KL estimator
``exp(ref - logp) - (ref - logp) - 1`` and ``torch.exp(logp - logp.detach()) * advantages``,
AdamW with ``clip_grad_norm_``.

Only the import lines and the gradient lines differ in the port.
"""

from __future__ import annotations

import pytest

from real_ports import (
    assert_records_agree,
    initializer,
    params_of,
    runs_with_draws,
    seeded_draws,  # noqa: F401 (autouse: each test from fixed seeds)
)

GRPO_SOURCE = """
import collections
import copy
import types

import torch
import torch.nn as nn

F = nn.functional


class Decoder(nn.Module):
    def __init__(self, vocab, dim, heads, max_len):
        super().__init__()
        self.heads = heads
        self.tok, self.pos = nn.Embedding(vocab, dim), nn.Embedding(max_len, dim)
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.norm_out = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)  # a key bias has no true gradient
        self.mix = nn.Linear(dim, dim)
        self.ff = nn.Sequential(
            nn.Linear(dim, 2 * dim), nn.GELU(approximate="tanh"), nn.Linear(2 * dim, dim)
        )
        self.unembed = nn.Linear(dim, vocab, bias=False)

    def forward(self, ids, mask, positions=None, keep_last=0):
        b, t = ids.shape
        if positions is None:
            positions = mask.long().cumsum(-1) - 1
            positions.masked_fill_(mask == 0, 1)
        causal = torch.tril(torch.ones(t, t, dtype=torch.bool))[None, None]
        visible = causal & mask[:, None, None, :].bool()
        dt = self.tok.weight.dtype
        bias = (1.0 - visible.to(dt)) * torch.finfo(dt).min
        x = self.tok(ids) + self.pos(positions)
        h = self.norm1(x)
        split = self.qkv(h).chunk(3, dim=-1)
        q, k, v = (z.view(b, t, self.heads, -1).transpose(1, 2) for z in split)
        att = F.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)) + bias, dim=-1)
        x = x + self.mix((att @ v).transpose(1, 2).reshape(b, t, -1))
        x = self.norm_out(x + self.ff(self.norm2(x)))
        return self.unembed(x[:, -keep_last:, :] if keep_last else x)


def shape_scores(ids, scores, penalty, temperature, top_k):
    seen = torch.gather(scores, 1, ids)
    seen = torch.where(seen < 0, seen * penalty, seen / penalty)  # repeated tokens less likely
    scores = scores.scatter(1, ids, seen) / temperature
    kth = torch.topk(scores, min(top_k, scores.size(-1)))[0][..., -1, None]
    return scores.masked_fill(scores < kth, -float("inf"))


@torch.no_grad()
def sample(lm, ids, mask, steps, cfg):
    alive = torch.ones(ids.shape[0], dtype=torch.long)
    for _ in range(steps):
        pos = mask.long().cumsum(-1) - 1
        pos.masked_fill_(mask == 0, 1)
        scores = lm(ids, mask, positions=pos)[:, -1, :].clone().float()
        scores = shape_scores(ids, scores, cfg.penalty, cfg.temperature, cfg.top_k)
        probs = F.softmax(scores, dim=-1)
        u = torch.rand(ids.shape[0], 1)
        tok = (probs.cumsum(dim=-1) < u).sum(dim=-1).clamp(max=probs.size(-1) - 1)
        tok = tok * alive + cfg.pad * (1 - alive)
        ids = torch.cat([ids, tok[:, None]], dim=-1)
        mask = torch.cat([mask, mask.new_ones((mask.shape[0], 1))], dim=-1)
        alive = alive & ~(tok == cfg.eos)
        if alive.max() == 0:
            break
    return ids


def token_logps(logits, targets):
    picked = torch.gather(logits, dim=-1, index=targets.unsqueeze(-1)).squeeze(-1)
    norms = torch.stack([torch.logsumexp(row, dim=-1) for row in logits])  # row by row: less memory
    return picked - norms


class GroupPolicyTrainer:
    def __init__(self, lm, rewards, weights, cfg):
        self.lm, self.rewards, self.cfg = lm, rewards, cfg
        self.ref = copy.deepcopy(lm)
        for p in self.ref.parameters():
            p.requires_grad = False
        self.ref.eval()
        self.weights = torch.tensor(weights, dtype=torch.float32)
        self.opt = torch.optim.AdamW(lm.parameters(), lr=cfg.lr)
        self.stats = collections.defaultdict(list)

    def logps(self, lm, ids, mask, n_new):
        logits = lm(ids, mask, keep_last=n_new + 1)[:, :-1, :]
        return token_logps(logits[:, -n_new:], ids[:, -n_new:])

    def rollout(self, prompt_ids, prompt_mask):
        g = self.cfg.group
        prompt_ids = prompt_ids.repeat_interleave(g, dim=0)
        prompt_mask = prompt_mask.repeat_interleave(g, dim=0)
        full = sample(self.lm, prompt_ids, prompt_mask, self.cfg.max_new, self.cfg)
        new = full[:, prompt_ids.size(1):]
        is_eos = new == self.cfg.eos
        first = torch.full((is_eos.size(0),), is_eos.size(1), dtype=torch.long)
        first[is_eos.any(dim=1)] = is_eos.int().argmax(dim=1)[is_eos.any(dim=1)]
        steps = torch.arange(is_eos.size(1)).expand(is_eos.size(0), -1)
        new_mask = (steps <= first.unsqueeze(1)).int()
        with torch.inference_mode():
            both_mask = torch.cat([prompt_mask, new_mask], dim=1)
            ref_logps = self.logps(self.ref, full, both_mask, new.size(1))
        texts = [row[: int(n)] for row, n in zip(new.tolist(), new_mask.sum(1).tolist())]
        table = torch.zeros(len(texts), len(self.rewards))
        for j, fn in enumerate(self.rewards):
            table[:, j] = torch.tensor(fn(texts), dtype=torch.float32)
        total = (table * self.weights.unsqueeze(0)).sum(dim=1)
        mean = total.view(-1, g).mean(dim=1).repeat_interleave(g, dim=0)
        std = total.view(-1, g).std(dim=1).repeat_interleave(g, dim=0)
        self.stats["reward"].append(total.mean().item())
        self.stats["reward_std"].append(std.mean().item())
        return prompt_ids, prompt_mask, new, new_mask, ref_logps, (total - mean) / (std + 1e-4)

    def step(self, prompt_ids, prompt_mask):
        self.lm.train()
        p_ids, p_mask, new, new_mask, ref_logps, adv = batch = self.rollout(prompt_ids, prompt_mask)
        ids, mask = torch.cat([p_ids, new], 1), torch.cat([p_mask, new_mask], 1)
        logp = self.logps(self.lm, ids, mask, new.size(1))
        kl = torch.exp(ref_logps - logp) - (ref_logps - logp) - 1
        per_token = -(torch.exp(logp - logp.detach()) * adv.unsqueeze(1) - self.cfg.beta * kl)
        loss = ((per_token * new_mask).sum(dim=1) / new_mask.sum(dim=1)).mean()
        self.stats["kl"].append(((kl * new_mask).sum(dim=1) / new_mask.sum(dim=1)).mean().item())
        self.opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.lm.parameters(), self.cfg.max_norm)
        self.opt.step()
        return loss.detach(), batch


EOS, PAD = 1, 0
lm = Decoder(vocab=9, dim=8, heads=2, max_len=14)
initialize(lm)
cfg = types.SimpleNamespace(group=3, max_new=5, beta=beta, penalty=1.3, temperature=0.9, top_k=5,
                      lr=3e-2, max_norm=1.0, eos=EOS, pad=PAD)
rewards = [
    lambda texts: [-abs(4 - len(t)) / 2.0 for t in texts],
    lambda texts: [sum(tok == 3 for tok in t) / max(len(t), 1) for t in texts],
    lambda texts: [float(bool(t) and t[-1] == EOS) for t in texts],
]
trainer = GroupPolicyTrainer(lm, rewards, [1.0, 2.0, 0.5], cfg)
prompt_ids = torch.tensor([[PAD, 4, 5], [7, 2, 8]])  # left-padded for generation
prompt_mask = torch.tensor([[0, 1, 1], [1, 1, 1]])
for _ in range(3):
    loss, (_, _, new, new_mask, ref_logps, adv) = trainer.step(prompt_ids, prompt_mask)
    record.extend([new.tolist(), new_mask.tolist(), adv.numpy(), ref_logps.numpy(), loss.item()])
    record.append(params_of(lm))
record.append({k: np.array(v) for k, v in trainer.stats.items()})
"""

STEPS = [
    (
        "\nimport torch\nimport torch.nn as nn\n",
        "\nimport retrograd as torch\nimport retrograd.nn as nn\n",
    ),
    (
        "        loss.backward()\n"
        "        torch.nn.utils.clip_grad_norm_(self.lm.parameters(), self.cfg.max_norm)\n"
        "        self.opt.step()\n",
        "        grads = loss.backward()\n"
        "        torch.nn.utils.clip_grad_norm_(grads, self.lm.parameters(), self.cfg.max_norm)\n"
        "        self.opt.step(grads)\n",
    ),
]


@pytest.mark.parametrize("beta", [0.04, 0.0])
def test_group_relative_policy_optimisation_as_torch(capsys, beta):
    (theirs, ours), _ = runs_with_draws(
        GRPO_SOURCE, STEPS, capsys, 24301, beta=beta, initialize=initializer(), params_of=params_of
    )
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)
