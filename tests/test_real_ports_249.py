"""Real ports, continued (the harness: ``tests/real_ports.py``): a program written here in the
style of Hugging Face transformers' ``generation/logits_process.py``: score processors (a
minimum length, an n-gram ban, an exponentially growing end-of-sequence bonus) chained ahead of
sampling warpers (top-p, min-p, typical, epsilon and eta cut-offs), run over a tiny recurrent
LM's greedy decoding loop, against torch's run of the same program from the same weights (every
processed score recorded).

Surface and the regressions it guards: ``torch.sort`` then ``softmax().cumsum()`` and a boolean
mask sent back to vocabulary order by ``mask.scatter(1, order, mask)`` of booleans;
``nansum``; ``torch.gather`` of booleans; ``argsort(descending=True)``; ``count.clamp_(max=...)``
in place on an integer tensor; ``torch.distributions.Categorical(logits=s).entropy()`` and
``torch.min`` of a 0-d tensor with a batch; ``torch.topk(s, k)[0][..., -1, None]``;
``scores[i, banned] = -float("inf")`` where ``banned`` may be an empty list; ``torch.isin``;
``torch.where(mask, -math.inf, scores)``; ``bonus[:, eos] = value`` with a tensor index;
``torch.is_floating_point``.
"""

from __future__ import annotations

import numpy as np

from real_ports import (
    assert_records_agree,
    initializer,
    runs_with_draws,
    seeded_draws,  # noqa: F401 (autouse: each test from fixed seeds)
)

PROCESSORS_SOURCE = """
import math

import torch
import torch.nn as nn

NEG = -float("inf")


def hold_back_eos(min_len, eos):
    eos = torch.tensor([eos] if isinstance(eos, int) else eos)

    def apply(ids, scores):
        if ids.shape[-1] >= min_len:
            return scores.clone()
        is_eos = torch.isin(torch.arange(scores.shape[-1]), eos)
        return torch.where(is_eos, -math.inf, scores)
    return apply


def ban_repeated_ngrams(n):
    def apply(ids, scores):
        out = scores.clone()
        length = ids.shape[-1]
        for row, seq in enumerate(ids.tolist()):
            followers = {}
            for gram in zip(*(seq[k:] for k in range(n))):
                followers.setdefault(tuple(gram[:-1]), []).append(gram[-1])
            banned = followers.get(tuple(seq[length - n + 1 :]), []) if length + 1 >= n else []
            out[row, banned] = NEG  # an empty list bans nothing
        return out
    return apply


class EosBonus:
    # past a start, the end-of-sequence scores grow by a factor per extra token
    def __init__(self, start, factor, eos, prompt_len):
        eos = torch.tensor(eos)
        if torch.is_floating_point(eos) or (eos < 0).any():
            raise ValueError(f"eos ids must be non-negative integers, got {eos}")
        self.eos, self.start, self.factor = eos, start + prompt_len, factor

    def __call__(self, ids, scores):
        extra = ids.shape[-1] - self.start
        if extra <= 0:
            return scores
        bonus = torch.zeros_like(scores)
        bonus[:, self.eos] = scores[:, self.eos].abs() * (self.factor**extra - 1)
        return scores + bonus


def nucleus(p, keep=1):
    def apply(ids, scores):
        ascending, order = torch.sort(scores, descending=False)
        drop = ascending.softmax(dim=-1).cumsum(dim=-1) <= 1 - p
        drop[..., -keep:] = 0
        return scores.masked_fill(drop.scatter(1, order, drop), NEG)
    return apply


def relative_floor(min_p, keep=1):
    def apply(ids, scores):
        p_tok = torch.softmax(scores, dim=-1)
        low = p_tok < min_p * p_tok.max(dim=-1, keepdim=True)[0]
        order = torch.argsort(scores, descending=True, dim=-1)
        low_sorted = torch.gather(low, dim=-1, index=order)
        low_sorted[..., :keep] = False
        return scores.masked_fill(low_sorted.scatter(1, order, low_sorted), NEG)
    return apply


def typical(mass, keep=1):
    def apply(ids, scores):
        logp = torch.nn.functional.log_softmax(scores, dim=-1)
        entropy = -(logp * logp.exp()).nansum(-1, keepdim=True)
        surprise = (-logp - entropy).abs()
        surprise_sorted, order = torch.sort(surprise)
        within = scores.gather(-1, order).softmax(dim=-1).cumsum(dim=-1) < mass
        cut = within.sum(dim=1)
        cut.clamp_(max=surprise_sorted.shape[-1] - 1)
        drop = surprise_sorted > surprise_sorted.gather(1, cut.view(-1, 1))
        drop[..., :keep] = 0
        return scores.masked_fill(drop.scatter(1, order, drop), NEG)
    return apply


def kth_best(scores, keep):
    return torch.topk(scores, min(keep, scores.size(-1)))[0][..., -1, None]


def epsilon_cut(eps, keep=1):
    def apply(ids, scores):
        drop = (scores.softmax(dim=-1) < eps) & (scores < kth_best(scores, keep))
        return scores.masked_fill(drop, NEG)
    return apply


def eta_cut(eps, keep=1):
    eps = torch.tensor(eps)

    def apply(ids, scores):
        h = torch.distributions.Categorical(logits=scores).entropy()
        eta = torch.min(eps, eps.sqrt() * torch.exp(-h))[..., None]
        drop = (scores.softmax(dim=-1) < eta) & (scores < kth_best(scores, keep))
        return scores.masked_fill(drop, NEG)
    return apply


class RecurrentLM(nn.Module):
    def __init__(self, vocab, dim):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.gru = nn.GRU(dim, dim, batch_first=True)
        self.proj = nn.Linear(dim, vocab)

    def forward(self, ids):
        return self.proj(self.gru(self.embed(ids))[0])


lm = RecurrentLM(10, 8)
initialize(lm)
lm.eval()
ids = torch.tensor(prompts)
processors = [hold_back_eos(5, 1), ban_repeated_ngrams(2), EosBonus(2, 1.5, [3, 7], ids.shape[-1])]
warpers = [nucleus(0.8, keep=2), relative_floor(0.2), typical(0.7)]
warpers += [epsilon_cut(0.05, keep=2), eta_cut(0.1)]
with torch.no_grad():
    for _ in range(6):
        scores = 3.0 * lm(ids)[:, -1, :]
        for process in processors:
            scores = process(ids, scores)
        record.append(scores.numpy())
        record.extend(warp(ids, scores).numpy() for warp in warpers)
        ids = torch.cat([ids, scores.argmax(dim=-1)[:, None]], dim=-1)
record.append(ids.tolist())
"""

STEPS = [
    (
        "\nimport torch\nimport torch.nn as nn\n",
        "\nimport retrograd as torch\nimport retrograd.nn as nn\n",
    ),
]


def test_logits_processors_and_sampling_warpers_as_torch(capsys):
    rng = np.random.default_rng(24901)
    prompts = rng.integers(2, 10, (3, 4)).tolist()
    prompts[1] = [4, 6, 4, 6]  # a repeated bigram: the n-gram ban bites at once
    (theirs, ours), _ = runs_with_draws(
        PROCESSORS_SOURCE, STEPS, capsys, 24901, prompts=prompts, initialize=initializer()
    )
    assert_records_agree(ours, theirs, rtol=1e-5, atol=1e-6)
    # each warper filters some step beyond what the processors already banned
    for j in range(1, 6):
        assert any(
            np.isinf(theirs[6 * s + j]).sum() > np.isinf(theirs[6 * s]).sum() for s in range(6)
        ), j
