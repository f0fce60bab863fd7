"""Real-port tests (the harness: ``tests/real_ports.py``): LLM inference written here in the style
of Hugging Face transformers (its LLaMA classes and rotary scalings, ``generate``'s logits
processors and beam search), of feifeibear/LLMSpeculativeSampling and of BLOOM/Mistral
attention, each run against torch's run of the same program from the same weights and draws.

- A rotary decoder under each rotary scaling (default, linear, dynamic NTK growing ``inv_freq``
  from ``torch.max(position_ids) + 1``, a tensor carried into ``base ** (...)``; YaRN's
  ``torch.clamp`` ramp; llama3's ``~(wavelen < ...) * ~(wavelen > ...)``), computed under
  ``@torch.no_grad()`` and ``torch.autocast(device_type, enabled=False)``,
  ``register_buffer(..., persistent=False)`` re-registered as the context grows; RMSNorm by
  ``rsqrt``; grouped-query attention by ``repeat_interleave`` (method and function) into
  ``F.scaled_dot_product_attention`` with ``is_causal`` and a key/value cache grown by
  ``torch.cat``; trained two AdamW steps, then decoded greedily and by ``torch.multinomial``
  through filters: a repetition penalty (``gather``/``where``/``scatter``), temperature, top-k
  (``torch.topk(...)[0][..., -1, None]``), top-p (ascending ``sort``, ``cumsum``, ``drop[...,
  -1:] = 0``, ``scatter(1, order, drop)``), min-p (``argsort``, ``gather``); stopping by
  ``torch.full(..., dtype=torch.bool)``, ``torch.isin`` and ``live & ~done``; the cached logits
  checked against a full forward under ``torch.inference_mode``.
- Beam search over a small GPT-2-style model (a ``torch.tril`` bool buffer, ``torch.finfo(dtype)
  .min`` as ``torch.full([], ...)``, a tied head, a tuple cache): ``topk`` over ``(batch, beams
  * vocab)``, ``torch.div(..., rounding_mode="floor")``, the cache reordered by
  ``index_select``, ended hypotheses scored with a length penalty under three early-stopping
  rules.
- Speculative sampling: ``logits[logits < kth[:, [-1]]] = float('-inf')``, ``over[..., 1:] =
  over[..., :-1].clone()``, ``q[:, i, :] = ...`` row writes, the accept test ``u <
  torch.min(torch.tensor([1]), p[:, t, j] / q[:, t, j])`` and the resampling from ``max(p - q,
  0)``.
- ALiBi slopes for a head count that is not a power of two, ``bias.baddbmm(batch1=...,
  batch2=..., beta=..., alpha=...)``, ``torch.masked_fill`` with a bool mask built from
  ``torch.empty`` and ``~mask.to(torch.bool)``, ``F.softmax(..., dtype=torch.float32)``,
  ``torch.bmm``; next to a sliding-window layer whose float mask is ``torch.log`` of a banded
  integer ``tril``/``triu``; padded labels by ``masked_fill(... , -100)``; trained by SGD with
  momentum.

These programs exposed no defect when first ported; they guard the surface above.
``torch.multinomial`` is one inverse-CDF stream of uniforms in both runs, so that a sampled
token depends only on the probabilities each library computed. The lines the port changes: the
``import`` lines and the gradient lines (``grads = loss.backward()``, ``opt.step(grads)``).
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
    runs_with_draws,
    seeded_draws,  # noqa: F401 (autouse: each test from fixed seeds)
)


def _shared_multinomial(monkeypatch, seed):
    """``torch.multinomial`` of both libraries by the inverse CDF of one seeded stream each
    (restarted for each library), so both draw the same tokens from the same probabilities."""

    def make(lib):
        draws = np.random.default_rng(seed)

        def multinomial(probs, num_samples, replacement=False, generator=None):
            p = np.asarray(probs.detach().numpy(), dtype=np.float64)
            cdf = np.cumsum(p / p.sum(-1, keepdims=True), -1)
            u = draws.uniform(size=p.shape[:-1] + (num_samples,))
            picks = (u[..., :, None] > cdf[..., None, :]).sum(-1)
            return lib.tensor(np.minimum(picks, p.shape[-1] - 1), dtype=lib.int64)

        monkeypatch.setattr(lib, "multinomial", multinomial)

    return make


PLAIN_IMPORTS = "\nimport torch\nfrom torch import nn\n"
PORTED_IMPORTS = "\nimport retrograd as torch\nfrom retrograd import nn\n"


# -- a rotary decoder with scaled frequencies, a key/value cache and filtered sampling ------------
ROTARY_LM_SOURCE = '''
import math
import torch
from torch import nn


def rope_frequencies(cfg, seq_len=None):
    """Rotary inverse frequencies under cfg.rope_scaling, and the gain applied to cos/sin."""
    dim = getattr(cfg, "head_dim", cfg.hidden_size // cfg.num_attention_heads)
    scaling = cfg.rope_scaling or {}
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    base = cfg.rope_theta
    if kind == "dynamic" and seq_len is not None:
        # NTK-aware growth: past the trained context the base stretches (seq_len is a tensor)
        factor = scaling["factor"]
        stretch = factor * seq_len / cfg.max_position_embeddings - (factor - 1)
        base = base * stretch ** (dim / (dim - 2))
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    gain = 1.0
    if kind == "linear":
        inv_freq /= scaling["factor"]
    elif kind == "yarn":
        factor = scaling["factor"]
        gain = scaling.get("attention_factor") or 0.1 * math.log(factor) + 1.0

        def dim_turning(turns):  # the dimension that turns `turns` times over the trained context
            spread = math.log(cfg.max_position_embeddings / (turns * 2 * math.pi))
            return dim * spread / (2 * math.log(base))

        lo = max(math.floor(dim_turning(scaling.get("beta_fast") or 32)), 0)
        hi = min(math.ceil(dim_turning(scaling.get("beta_slow") or 1)), dim - 1)
        hi = hi + 0.001 if hi == lo else hi
        ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float32) - lo) / (hi - lo), 0, 1)
        inv_freq = inv_freq / factor * ramp + inv_freq * (1 - ramp)
    elif kind == "llama3":
        factor, context = scaling["factor"], scaling["original_max_position_embeddings"]
        low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
        wavelength = 2 * math.pi / inv_freq
        slow = torch.where(wavelength > context / low, inv_freq / factor, inv_freq)
        mix = (context / wavelength - low) / (high - low)
        blended = (1 - mix) * slow / factor + mix * slow
        in_between = ~(wavelength < context / high) * ~(wavelength > context / low)
        inv_freq = torch.where(in_between, blended, slow)
    return inv_freq, gain


class RMSNorm(nn.Module):
    def __init__(self, width, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.eps = eps

    def forward(self, x):
        kept = x.dtype
        x = x.to(torch.float32)
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(kept)


class Rotary(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.dynamic = "dynamic" in str(cfg.rope_scaling)
        start_freqs, self.gain = rope_frequencies(cfg)
        self.register_buffer("inv_freq", start_freqs, persistent=False)
        self.trained_inv_freq = self.inv_freq
        self.cached_len = cfg.max_position_embeddings

    def regrow(self, position_ids):
        seen = torch.max(position_ids) + 1
        if seen > self.cached_len:
            grown, self.gain = rope_frequencies(self.cfg, seq_len=seen)
            self.register_buffer("inv_freq", grown, persistent=False)
            self.cached_len = seen
        if seen < self.cfg.max_position_embeddings < self.cached_len:  # back to the trained scale
            self.register_buffer("inv_freq", self.trained_inv_freq, persistent=False)
            self.cached_len = self.cfg.max_position_embeddings

    @torch.no_grad()
    def forward(self, x, positions):
        if self.dynamic:
            self.regrow(positions)
        freqs = self.inv_freq[None, :, None].float().expand(positions.shape[0], -1, 1)
        where = positions[:, None, :].float()
        with torch.autocast(device_type=x.device.type, enabled=False):  # angles stay float32
            angles = (freqs @ where).transpose(1, 2)
            angles = torch.cat((angles, angles), dim=-1)
        cos, sin = angles.cos() * self.gain, angles.sin() * self.gain
        wanted = x.dtype
        return cos.to(dtype=wanted), sin.to(dtype=wanted)


def rotate(x, cos, sin):
    half = x.shape[-1] // 2
    turned = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos.unsqueeze(1) + turned * sin.unsqueeze(1)


class GroupedAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.heads, self.kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
        self.head_dim = cfg.hidden_size // self.heads
        self.q = nn.Linear(cfg.hidden_size, self.heads * self.head_dim, bias=False)
        kv_width = self.kv_heads * self.head_dim
        self.kv = nn.ModuleList([nn.Linear(cfg.hidden_size, kv_width, bias=False) for _ in 'kv'])
        self.out = nn.Linear(cfg.hidden_size, cfg.hidden_size, bias=False)

    def forward(self, x, rope, cache=None):
        b, t, _ = x.size()
        q = self.q(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k, v = (f(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2) for f in self.kv)
        q, k = rotate(q, *rope), rotate(k, *rope)
        if cache is not None:
            if cache:
                k = torch.cat([cache[0], k], dim=-2)
                v = torch.cat([cache[1], v], dim=-2)
            cache[:] = [k, v]
        groups = self.heads // self.kv_heads
        k = k.repeat_interleave(groups, dim=1)
        v = torch.repeat_interleave(v, groups, dim=1)
        y = nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=None, dropout_p=0.0, is_causal=t > 1
        )
        return self.out(y.transpose(1, 2).contiguous().view(b, t, -1))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.attn_norm, self.mlp_norm = RMSNorm(cfg.hidden_size), RMSNorm(cfg.hidden_size)
        self.attn = GroupedAttention(cfg)
        self.gate = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)
        self.act = nn.SiLU()

    def forward(self, x, rope, cache=None):
        x = x + self.attn(self.attn_norm(x), rope, cache)
        h = self.mlp_norm(x)
        return x + self.down(self.act(self.gate(h)) * self.up(h))


class TinyDecoder(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.blocks = nn.ModuleList([Block(cfg) for _ in range(cfg.num_hidden_layers)])
        self.norm = RMSNorm(cfg.hidden_size)
        self.rotary = Rotary(cfg)
        self.head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)

    def forward(self, ids, caches=None, targets=None):
        start = caches[0][0].shape[-2] if caches and caches[0] else 0
        x = self.embed(ids)
        positions = torch.arange(start, start + ids.shape[1]).unsqueeze(0)
        rope = self.rotary(x, positions)
        for i, block in enumerate(self.blocks):
            x = block(x, rope, None if caches is None else caches[i])
        logits = self.head(self.norm(x)).float()
        if targets is None:
            return logits, None
        shifted = logits[..., :-1, :].contiguous().view(-1, self.cfg.vocab_size)
        return logits, nn.CrossEntropyLoss()(shifted, targets[..., 1:].contiguous().view(-1))


# -- logits filters, each (ids so far, scores) -> scores --
def penalize_seen(penalty):
    def apply(ids, scores):
        seen = torch.gather(scores, 1, ids)
        seen = torch.where(seen < 0, seen * penalty, seen / penalty)
        return scores.scatter(1, ids, seen)
    return apply


def keep_top_k(k):
    def apply(ids, scores):
        kth = torch.topk(scores, min(k, scores.size(-1)))[0][..., -1, None]
        return scores.masked_fill(scores < kth, -float("inf"))
    return apply


def keep_nucleus(top_p):
    def apply(ids, scores):
        ascending, order = torch.sort(scores, descending=False)
        drop = ascending.softmax(dim=-1).cumsum(dim=-1) <= (1 - top_p)
        drop[..., -1:] = 0  # the likeliest token always stays
        return scores.masked_fill(drop.scatter(1, order, drop), -float("inf"))
    return apply


def keep_above_min_p(min_p):
    def apply(ids, scores):
        p = torch.softmax(scores, dim=-1)
        top, _ = p.max(dim=-1, keepdim=True)
        order = torch.argsort(scores, descending=True, dim=-1)
        drop = torch.gather(p < min_p * top, dim=-1, index=order)
        drop[..., :1] = False
        return scores.masked_fill(drop.scatter(1, order, drop), -float("inf"))
    return apply


@torch.no_grad()
def generate(model, ids, filters, max_length, eos, sample):
    live = torch.ones(ids.shape[0], dtype=torch.long)
    caches = [[] for _ in model.blocks]
    stop_ids = torch.tensor([eos])
    fed, dists = ids, []
    while True:
        logits, _ = model(fed, caches)
        scores = logits[:, -1, :].clone().float()
        for f in filters:
            scores = f(ids, scores)
        probs = nn.functional.softmax(scores, dim=-1)
        if sample:
            nxt = torch.multinomial(probs, num_samples=1).squeeze(1)
        else:
            nxt = torch.argmax(scores, dim=-1)
        dists.append(probs)
        nxt = nxt * live + 0 * (1 - live)  # finished rows emit padding (0)
        ids = torch.cat([ids, nxt[:, None]], dim=-1)
        fed = nxt[:, None]
        done = torch.full((ids.shape[0],), ids.shape[-1] >= max_length, dtype=torch.bool)
        done = done | torch.isin(ids[:, -1], stop_ids)
        live = live & ~done
        if live.max() == 0:
            return ids, torch.stack(dists, dim=1), caches


model = TinyDecoder(config)
initialize(model)
positions = torch.arange(9)[None]
record.append(model.rotary.inv_freq.numpy())
record.append([t.numpy() for t in model.rotary(model.embed.weight, positions)])
if train_and_generate:
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
    for batch in batches:
        batch = torch.tensor(batch)
        _, loss = model(batch, targets=batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
        record.extend([loss.item(), params_of(model)])
    record.append(model.rotary.inv_freq.numpy())  # grown by the 9-token batches

    model.eval()
    prompt = torch.tensor(prompts)
    filters = [penalize_seen(1.3), lambda ids, s: s / 0.7, keep_top_k(6), keep_nucleus(0.9),
               keep_above_min_p(0.05)]
    for sample in (False, True):
        longest = prompt.shape[1] + new_tokens
        out, dists, caches = generate(model, prompt, filters, longest, eos, sample)
        record.extend([out.tolist(), dists.numpy(), (dists > 0).sum(-1).tolist()])
        with torch.inference_mode():
            full, _ = model(out[:, :-1])
        record.extend([full.numpy(), caches[0][0].numpy()])
'''

ROTARY_LM_STEPS = [
    (PLAIN_IMPORTS, PORTED_IMPORTS),
    (
        "        loss.backward()\n        opt.step()\n",
        "        grads = loss.backward()\n        opt.step(grads)\n",
    ),
]

ROPE_SCALINGS = {
    "linear": {"rope_type": "linear", "factor": 2.0},
    "dynamic": {"type": "dynamic", "factor": 2.0},
    "yarn": {"rope_type": "yarn", "factor": 4.0, "beta_fast": 4, "beta_slow": 1},
    "llama3": {
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8,
    },
}  # fmt: skip


@pytest.mark.parametrize("rope", list(ROPE_SCALINGS))
def test_rotary_scalings_kv_cache_and_sampling_filters_match_torch(capsys, monkeypatch, rope):
    # every scaling: its frequencies and cos/sin tables (YaRN's scaled by its gain); the dynamic
    # one also trains past max_position_embeddings (the frequencies grow) and decodes
    config = types.SimpleNamespace(
        vocab_size=13, hidden_size=16, intermediate_size=24, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, rope_theta=100.0,
        max_position_embeddings=6, rope_scaling=ROPE_SCALINGS[rope],
    )  # fmt: skip
    rng = np.random.default_rng(9801)
    batches = [rng.integers(0, 13, (2, 9)) for _ in range(2)]
    make_multinomial = _shared_multinomial(monkeypatch, 98)
    make_multinomial(torch)
    make_multinomial(rg)
    (theirs, ours), _ = runs_with_draws(
        ROTARY_LM_SOURCE, ROTARY_LM_STEPS, capsys, 9801, config=config, batches=batches,
        prompts=[[3, 5, 5, 1], [7, 2, 9, 9]], new_tokens=4, eos=12,
        initialize=initializer(), params_of=params_of, train_and_generate=rope == "dynamic",
    )  # fmt: skip
    assert len(theirs) == (2 + 2 * 2 + 1 + 2 * 5 if rope == "dynamic" else 2)
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)


# -- a one-block GPT-2-style model with a tuple cache, to decode from -----------------------------
SMALL_GPT_SOURCE = """
class CausalSelfAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        n = cfg.max_position_embeddings
        allowed = torch.tril(torch.ones((n, n), dtype=torch.bool)).view(1, 1, n, n)
        self.register_buffer("allowed", allowed, persistent=False)
        self.width, self.heads = cfg.hidden_size, cfg.num_attention_heads
        self.c_attn = nn.Linear(self.width, 3 * self.width)
        self.c_proj = nn.Linear(self.width, self.width)

    def heads_first(self, t):
        return t.view(t.size()[:-1] + (self.heads, self.width // self.heads)).permute(0, 2, 1, 3)

    def forward(self, x, past=None):
        q, k, v = (self.heads_first(t) for t in self.c_attn(x).split(self.width, dim=2))
        if past is not None:
            k, v = torch.cat((past[0], k), dim=-2), torch.cat((past[1], v), dim=-2)
        w = torch.matmul(q, k.transpose(-1, -2))
        w = w / torch.full([], v.size(-1) ** 0.5, dtype=w.dtype)
        tq, tk = q.size(-2), k.size(-2)
        floor = torch.full([], torch.finfo(w.dtype).min, dtype=w.dtype)
        w = torch.where(self.allowed[:, :, tk - tq : tk, :tk], w, floor)
        y = torch.matmul(nn.functional.softmax(w, dim=-1), v).permute(0, 2, 1, 3).contiguous()
        return self.c_proj(y.view(y.size()[:-2] + (self.width,))), (k, v)


class SmallGPT(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.wte = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.wpe = nn.Embedding(cfg.max_position_embeddings, cfg.hidden_size)
        self.ln_1, self.ln_f = nn.LayerNorm(cfg.hidden_size), nn.LayerNorm(cfg.hidden_size)
        self.attn = CausalSelfAttention(cfg)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # tied

    def forward(self, ids, past=None):
        start = 0 if past is None else past[0].size(-2)
        pos = torch.arange(start, start + ids.size(-1), dtype=torch.long).unsqueeze(0)
        h = self.wte(ids) + self.wpe(pos)
        a, present = self.attn(self.ln_1(h), past)
        return types.SimpleNamespace(logits=self.lm_head(self.ln_f(h + a)), past=present)
"""

# -- beam search with a length penalty and three early-stopping rules ------------------------------
BEAM_SOURCE = (
    """
import types
import torch
from torch import nn
"""
    + SMALL_GPT_SOURCE
    + '''

class Finished:
    """The best `size` ended hypotheses of one prompt, scored by log-prob / length ** penalty."""

    def __init__(self, size, penalty, early, max_length):
        self.size, self.penalty, self.early, self.max_length = size, penalty, early, max_length
        self.kept, self.worst = [], 1e9

    def add(self, ids, logprob, length):
        score = logprob / length ** self.penalty
        if len(self.kept) < self.size or score > self.worst:
            self.kept.append((score, ids))
            self.kept.sort(key=lambda pair: pair[0])
            if len(self.kept) > self.size:
                self.kept.pop(0)
            self.worst = self.kept[0][0]

    def closed(self, best_logprob, length, prompt_len):
        if len(self.kept) < self.size:
            return False
        if self.early is True:
            return True
        # "never" with a positive penalty: the best reachable score is at max_length
        horizon = self.max_length if self.early == "never" and self.penalty > 0 else length
        return self.worst >= best_logprob / (horizon - prompt_len) ** self.penalty


@torch.no_grad()
def beam_search(model, prompts, beams, max_length, eos, penalty, early, keep):
    n = len(prompts)
    ids = torch.tensor(prompts).repeat_interleave(beams, dim=0)
    prompt_len = ids.shape[-1]
    finished = [Finished(beams, penalty, early, max_length) for _ in range(n)]
    closed = torch.tensor([False] * n, dtype=torch.bool)
    totals = torch.zeros((n, beams), dtype=torch.float)
    totals[:, 1:] = -1e9  # all beams start equal: let only the first one expand
    totals = totals.view((n * beams,))
    past, fed = None, ids
    while True:
        out = model(fed, past)
        logp = nn.functional.log_softmax(out.logits[:, -1, :].clone(), dim=-1)
        vocab = logp.shape[-1]
        logp = (logp + totals[:, None].expand_as(logp)).view(n, beams * vocab)
        best, flat = torch.topk(logp, 2 * beams, dim=1, largest=True, sorted=True)
        src, tok = torch.div(flat, vocab, rounding_mode="floor"), flat % vocab
        new_totals = torch.zeros((n, beams), dtype=best.dtype)
        new_tokens = torch.zeros((n, beams), dtype=tok.dtype)
        new_src = torch.zeros((n, beams), dtype=src.dtype)
        for b in range(n):
            if closed[b]:
                new_tokens[b, :] = 0  # padding
                new_src[b, :] = b * beams
                continue
            filled = 0
            for rank, (t, s, i) in enumerate(zip(tok[b], best[b], src[b])):
                row = b * beams + i
                if t.item() == eos:
                    if rank < beams:
                        finished[b].add(ids[row].clone(), s.item(), ids.shape[-1] + 1 - prompt_len)
                else:
                    new_totals[b, filled], new_tokens[b, filled], new_src[b, filled] = s, t, row
                    filled += 1
                if filled == beams:
                    break
            length = ids.shape[-1] + 1
            best_open = new_totals[b].max().item()
            closed[b] = closed[b] | finished[b].closed(best_open, length, prompt_len)
        totals, order = new_totals.view(-1), new_src.view(-1)
        ids = torch.cat([ids[order, :], new_tokens.view(-1).unsqueeze(-1)], dim=-1)
        past = tuple(state.index_select(0, order) for state in out.past)
        fed = ids[:, -1:]
        if closed.all() or ids.shape[-1] >= max_length:
            break
    best_ids, best_scores = [], []
    for b in range(n):
        if not closed[b]:  # the open beams compete with the ended ones
            for j in range(beams):
                row = b * beams + j
                finished[b].add(ids[row], totals[row].item(), ids.shape[-1] - prompt_len)
        for score, hyp in sorted(finished[b].kept, key=lambda pair: -pair[0])[:keep]:
            best_ids.append(hyp)
            best_scores.append(score)
    longest = max(len(h) for h in best_ids)
    sequences = torch.full((len(best_ids), longest), 0, dtype=torch.long)
    for r, hyp in enumerate(best_ids):
        sequences[r, : len(hyp)] = hyp
    return sequences, torch.tensor(best_scores), finished


model = SmallGPT(config)
initialize(model)
model.eval()
for penalty, early in ((1.0, False), (2.0, "never"), (-0.5, True)):
    seqs, scores, finished = beam_search(model, prompts, 3, max_length, eos, penalty, early, keep=2)
    record.extend([seqs.tolist(), scores.numpy()])
    record.append([[round(s, 4), h.tolist()] for f in finished for s, h in f.kept])
'''
)

BEAM_STEPS = [(PLAIN_IMPORTS, PORTED_IMPORTS)]


# -- speculative decoding: a small draft model proposes, the larger one accepts or resamples ----
SPECULATIVE_SOURCE = (
    """
import types
import torch
from torch import nn
from torch.nn.functional import softmax
"""
    + SMALL_GPT_SOURCE
    + """

def filtered_probs(logits, temperature, top_k=0, top_p=0.0):
    logits = logits / temperature
    if top_k > 0:
        kth = torch.topk(logits, min(top_k, logits.size(-1)))[0]
        logits[logits < kth[:, [-1]]] = float('-inf')
    if top_p > 0.0:
        ranked, order = torch.sort(logits, descending=True)
        over = torch.cumsum(softmax(ranked, dim=-1), dim=-1) > top_p
        over[..., 1:] = over[..., :-1].clone()  # keep the token that crosses top_p
        over[..., 0] = 0
        logits[over.scatter(1, order, over)] = float('-inf')
    return softmax(logits, dim=1)


def draw(probs):
    token = torch.multinomial(probs, num_samples=1)
    assert token.item() != 0, "the padding token was drawn"
    return token


def positive_part(diff):
    kept = torch.where(diff > 0, diff, torch.zeros_like(diff))
    return kept / torch.sum(kept, dim=1, keepdim=True)


@torch.no_grad()
def speculate(prefix, draft, target, new_tokens, lookahead, **knobs):
    end = prefix.shape[1] + new_tokens
    while prefix.shape[1] < end:
        start, x = prefix.shape[1], prefix
        for _ in range(lookahead):
            q = draft(x).logits
            x = torch.cat((x, draw(filtered_probs(q[:, -1, :], **knobs))), dim=1)
        for i in range(q.shape[1]):
            q[:, i, :] = filtered_probs(q[:, i, :], **knobs)
        p = target(x).logits
        for i in range(p.shape[1]):
            p[:, i, :] = filtered_probs(p[:, i, :], **knobs)
        last = start - 1  # the last position whose token stands
        for i in range(lookahead):
            j = x[:, start + i]
            u = torch.rand(1)
            if u < torch.min(torch.tensor([1]), p[:, last, j] / q[:, last, j]):
                last += 1
            else:
                fix = draw(positive_part(p[:, last, :] - q[:, last, :]))
                break
        else:
            fix = draw(p[:, -1, :])
        prefix = torch.cat((x[:, : last + 1], fix), dim=1)
        record.extend([last, prefix.tolist(), p.numpy()])
    return prefix


draft = SmallGPT(small)
initialize(draft)
target = SmallGPT(large)
initialize(target)
for knobs in ({"top_k": 4}, {"top_p": 0.8}):
    out = speculate(torch.tensor([[1, 2]]), draft, target, 6, 3, temperature=0.9, **knobs)
    record.append(out.tolist())
"""
)

SPECULATIVE_STEPS = [(PLAIN_IMPORTS, PORTED_IMPORTS)]


def test_beam_search_with_length_penalty_matches_torch(capsys):
    config = types.SimpleNamespace(
        vocab_size=9, hidden_size=8, num_attention_heads=2, max_position_embeddings=12
    )
    (theirs, ours), _ = runs_with_draws(
        BEAM_SOURCE, BEAM_STEPS, capsys, 9802, config=config, prompts=[[1, 4], [6, 2]],
        max_length=7, eos=7, initialize=initializer(),
    )  # fmt: skip
    assert_records_agree(ours, theirs, rtol=1e-5, atol=1e-6)


def test_speculative_sampling_accepts_and_rejects_as_torch(capsys, monkeypatch):
    small = types.SimpleNamespace(
        vocab_size=10, hidden_size=4, num_attention_heads=1, max_position_embeddings=16
    )
    large = types.SimpleNamespace(
        vocab_size=10, hidden_size=8, num_attention_heads=2, max_position_embeddings=16
    )
    make_multinomial = _shared_multinomial(monkeypatch, 99)
    make_multinomial(torch)
    make_multinomial(rg)
    (theirs, ours), _ = runs_with_draws(
        SPECULATIVE_SOURCE, SPECULATIVE_STEPS, capsys, 9803, small=small, large=large,
        initialize=initializer(),
    )  # fmt: skip
    assert_records_agree(ours, theirs, rtol=1e-5, atol=1e-6)


# -- ALiBi attention next to a sliding-window layer, trained a few steps ---------------------------
ALIBI_SOURCE = '''
import math
import torch
import torch.nn.functional as nnf
from torch import nn


def alibi_slopes(heads):
    """Geometric slopes for the largest power of two <= heads, then every other slope of the
    next power of two for the remaining heads."""
    pow2 = 2 ** math.floor(math.log2(heads))
    ratio = torch.tensor(2 ** (-8 / pow2), dtype=torch.float32)
    slopes = torch.pow(ratio, torch.arange(1, 1 + pow2, dtype=torch.int32))
    if pow2 != heads:
        finer = torch.tensor(2 ** (-8 / (2 * pow2)), dtype=torch.float32)
        odd = torch.arange(1, 1 + 2 * min(pow2, heads - pow2), 2, dtype=torch.int32)
        slopes = torch.cat([slopes, torch.pow(finer, odd)], dim=0)
    return slopes


def alibi_bias(pad_mask, heads, dtype):
    # key positions counted over the real tokens only; one row per (batch, head)
    b, n = pad_mask.shape
    positions = ((pad_mask.cumsum(dim=-1) - 1) * pad_mask)[:, None, :]
    return (alibi_slopes(heads)[..., None] * positions).reshape(b * heads, 1, n).to(dtype)


def blocked_positions(pad_mask):
    # True where a query may not look: the future, or padding
    b, n = pad_mask.shape
    future = torch.empty((n, n), dtype=torch.bool)
    idx = torch.arange(n)
    future[:, :] = idx[:, None] < idx[None, :]
    future = future[None, None, :, :].expand(b, 1, n, n)
    padding = ~(pad_mask[:, None, None, :].to(torch.bool))
    return padding.expand(b, 1, n, n) | future


def window_bias(b, n, window, dtype):
    band = torch.triu(torch.tril(torch.full((n, n), fill_value=1), diagonal=0), diagonal=-window)
    return torch.log(band).to(dtype)[None, None, :, :].expand(b, 1, n, n)  # 0 inside, -inf out


class AlibiAttention(nn.Module):
    def __init__(self, width, heads, dropout):
        super().__init__()
        self.heads, self.head_dim = heads, width // heads
        self.qkv = nn.Linear(width, 3 * width, bias=True)
        self.proj = nn.Linear(width, width)
        self.drop = nn.Dropout(dropout)
        self.dropout = dropout

    def forward(self, x, residual, bias, blocked):
        b, n, _ = x.shape
        fused = self.qkv(x).view(b, n, self.heads, 3, self.head_dim)
        q, k, v = fused[..., 0, :], fused[..., 1, :], fused[..., 2, :]
        q = q.transpose(1, 2).reshape(b * self.heads, n, self.head_dim)
        k = k.permute(0, 2, 3, 1).reshape(b * self.heads, self.head_dim, n)
        v = v.transpose(1, 2).reshape(b * self.heads, n, self.head_dim)
        scores = bias.baddbmm(batch1=q, batch2=k, beta=1.0, alpha=1.0 / math.sqrt(self.head_dim))
        scores = scores.view(b, self.heads, n, n)
        scores = torch.masked_fill(scores, blocked, torch.finfo(scores.dtype).min)
        probs = self.drop(nnf.softmax(scores, dim=-1, dtype=torch.float32).to(scores.dtype))
        ctx = torch.bmm(probs.view(b * self.heads, n, n), v)
        ctx = ctx.view(b, self.heads, n, self.head_dim).permute(0, 2, 1, 3).reshape(b, n, -1)
        return residual + nnf.dropout(self.proj(ctx), p=self.dropout, training=self.training)


class WindowAttention(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width, bias=False)
        self.proj = nn.Linear(width, width, bias=False)

    def forward(self, x, bias):
        b, n, _ = x.size()
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q, k, v = (t.view(b, n, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        y = nnf.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=0.0)
        return self.proj(y.transpose(1, 2).reshape(b, n, -1))


class TwoLayerLM(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        w, self.cfg = cfg.hidden_size, cfg
        self.embed = nn.Embedding(cfg.vocab_size, w)
        self.norms = nn.ModuleList([nn.LayerNorm(w, eps=1e-5) for _ in range(4)])
        self.alibi_attn = AlibiAttention(w, cfg.n_head, cfg.dropout)
        self.window_attn = WindowAttention(w, cfg.n_head)
        self.head = nn.Linear(w, cfg.vocab_size, bias=False)

    def forward(self, ids, pad_mask, labels):
        b, n = ids.shape
        h = self.norms[0](self.embed(ids))
        bias = alibi_bias(pad_mask, self.cfg.n_head, h.dtype)
        h = self.alibi_attn(self.norms[1](h), h, bias, blocked_positions(pad_mask))
        window = window_bias(b, n, self.cfg.sliding_window, h.dtype)
        h = h + self.window_attn(self.norms[2](h), window)
        logits = self.head(self.norms[3](h))[..., :-1, :].contiguous()
        targets = labels[..., 1:].contiguous().view(-1)
        loss = nn.CrossEntropyLoss()(logits.view(-1, logits.shape[-1]), targets)
        return loss, bias, window


model = TwoLayerLM(config)
initialize(model)
# SGD, not Adam: the key biases get no gradient (softmax ignores a per-row constant), and Adam
# would scale their rounding noise up to full steps
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
for ids, pad_mask in batches:
    ids, pad_mask = torch.tensor(ids), torch.tensor(pad_mask)
    labels = ids.masked_fill(pad_mask == 0, -100)
    loss, bias, window = model(ids, pad_mask, labels)
    opt.zero_grad()
    loss.backward()
    opt.step()
    record.extend([loss.item(), bias.numpy(), window.numpy(), params_of(model)])
'''

ALIBI_STEPS = [
    (
        "\nimport torch\nimport torch.nn.functional as nnf\n",
        "\nimport retrograd as torch\nimport retrograd.nn.functional as nnf\n",
    ),
    (
        "    loss.backward()\n    opt.step()\n",
        "    grads = loss.backward()\n    opt.step(grads)\n",
    ),
]


def test_alibi_with_sliding_window_trains_as_torch(capsys):
    config = types.SimpleNamespace(
        vocab_size=11, hidden_size=12, n_head=6, dropout=0.0, sliding_window=2
    )
    rng = np.random.default_rng(9804)
    padded = [[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]]
    batches = [(rng.integers(0, 11, (2, 6)), padded) for _ in range(3)]
    (theirs, ours), _ = runs_with_draws(
        ALIBI_SOURCE, ALIBI_STEPS, capsys, 9804, config=config, batches=batches,
        initialize=initializer(), params_of=params_of,
    )  # fmt: skip
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)
