"""Real-port tests (the harness: ``tests/real_ports.py``): LLM fine-tuning written here in the
style of huggingface/trl (DPO and its variants, a pairwise reward model, PPO with a value head),
of huggingface/peft (prefix and prompt tuning) and of transformers' Switch Transformers router
under its ``Trainer`` loop, each trained a few steps against torch's run of the same program
from the same weights and draws, over a small GPT-2-style model (an additive ``(1.0 - mask) *
torch.finfo(dtype).min`` padding bias, per-layer ``(key, value)`` pasts, ``inputs_embeds``).

- Preference tuning: chosen and rejected answers padded by ``torch.cat`` with ``value *
  torch.ones(*shape, dtype=...)`` and run as one batch; sequence log-probabilities by
  ``labels[labels == -100] = 0`` and ``torch.gather(logits.log_softmax(-1), dim=2, index=...)``;
  the sigmoid (label-smoothed ``F.logsigmoid``), hinge (``torch.relu``), IPO (averaged) and
  KTO-pair (``.mean().clamp(min=0)``, ``F.sigmoid``) losses against a frozen reference made by
  ``copy.deepcopy``, ``get_parameter(name).requires_grad = False`` and ``eval()``, run under
  ``torch.no_grad()``; metrics by ``.float().mean().cpu()``. A reward model pooled at each row's
  last real token (``torch.eq(ids, pad).int().argmax(-1) - 1``, ``% ids.shape[-1]``,
  ``scores[torch.arange(b), last]``) trained by ``-nn.functional.logsigmoid(good - bad -
  margin).mean()`` plus a centring term by ``loss +=``; its eval by ``torch.stack(...)
  .mean(dim=2).softmax(dim=0).T``.
- PPO: token log-probs by ``gather``; masks by ``torch.zeros_like``, ``mask[:, :-1] = attn[:,
  1:]``, a left-padding offset from ``attn[j, :].nonzero()[0]`` used as a slice bound; the
  score added at ``mask.nonzero()[-1]``; the ``kl``/``abs``/``mse``/``full`` (``F.kl_div(...,
  log_target=True, reduction="none")``) penalties; reversed GAE stacked and transposed; masked
  mean (``sum(axis=...)``), Bessel-corrected variance and whitening by ``torch.rsqrt`` (``+=``
  the mean back); ``torch.max(torch.min(x, hi), lo)`` value clipping, ``torch.clamp`` ratio
  clipping, ``torch.gt(...).float()``, entropy by ``torch.logsumexp(..., axis=-1)``; an adaptive
  KL coefficient by ``np.clip``; a value head (``nn.Identity`` for no dropout); a reference by
  ``load_state_dict`` and ``requires_grad_(False)``; ``clip_grad_norm_``.
- Prefix tuning (an ``Embedding``, with and without a ``Linear``/``Tanh`` projection) whose
  output is viewed as ``(batch, tokens, layers * 2, heads, head_dim)``, ``permute([2, 0, 3, 1,
  4]).split(2)`` and unpacked per layer by ``past_k, past_v = past``; prompt tuning initialised
  from the vocabulary (``torch.LongTensor(list(range(n)))``, ``.detach().clone()``, ``weight =
  torch.nn.Parameter(...)``) with ``-100`` prefix labels by ``torch.full(...).to(device)``; the
  adapters in a ``ModuleDict`` grown by ``update``; the base frozen child by child.
- A Switch router: top-1 by ``one_hot(argmax, num_classes=...)`` capped by ``torch.cumsum(...,
  dim=-2) <= capacity``; ``getattr(torch, "float32")``, ``classifier.to(dtype)``,
  ``softmax(..., dtype=...)``; experts in an ``nn.ModuleDict`` writing ``out[picked] =
  expert(x[picked])`` with ``.bool()`` masks; the z-loss (``torch.logsumexp``) and the
  load-balancing loss (``torch.max(one_hot, axis=-2).values``, ``torch.mean(..., axis=-2)``); a
  chunked ``F.cross_entropy(..., reduction="sum")`` checked by ``torch.allclose``; trained by a
  ``Trainer``-style loop: decay groups by name, ``AdamW(groups, betas=..., eps=...)``, gradient
  accumulation, ``clip_grad_norm_``'s returned norm, a warmup-cosine ``LambdaLR`` over
  ``functools.partial`` with keyword-only arguments, ``get_last_lr()``.

These programs exposed no defect when first ported; they guard the surface above. The lines
the port changes: the ``import`` lines and the gradient lines (``grads = loss.backward()``,
summed over accumulation steps, given to ``clip_grad_norm_`` and ``opt.step``).
"""

from __future__ import annotations

import types

import numpy as np

from real_ports import (
    assert_records_agree,
    initializer,
    params_of,
    runs_with_draws,
    seeded_draws,  # noqa: F401 (autouse: each test from fixed seeds)
)

HEADER = """
import copy
import types
import numpy as np
import torch
from torch.nn import functional as F
from torch import nn
"""

HEADER_STEP = (
    "\nimport torch\nfrom torch.nn import functional as F\nfrom torch import nn\n",
    "\nimport retrograd as torch\nfrom retrograd.nn import functional as F\n"
    "from retrograd import nn\n",
)

# a small GPT-2-style causal LM: padding bias, per-layer pasts, inputs_embeds, shifted LM loss
BASE_LM = """
class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        n = cfg.max_position_embeddings
        causal = torch.tril(torch.ones((n, n), dtype=torch.bool)).view(1, 1, n, n)
        self.register_buffer("causal", causal, persistent=False)
        self.width, self.heads = cfg.hidden_size, cfg.num_attention_heads
        self.c_attn = nn.Linear(self.width, 3 * self.width)
        self.c_proj = nn.Linear(self.width, self.width)

    def split(self, t):
        return t.view(t.size()[:-1] + (self.heads, self.width // self.heads)).permute(0, 2, 1, 3)

    def forward(self, x, past=None, pad_bias=None):
        q, k, v = (self.split(t) for t in self.c_attn(x).split(self.width, dim=2))
        if past is not None:
            past_k, past_v = past
            k, v = torch.cat((past_k, k), dim=-2), torch.cat((past_v, v), dim=-2)
        s = torch.matmul(q, k.transpose(-1, -2)) / torch.full([], v.size(-1) ** 0.5, dtype=q.dtype)
        tq, tk = q.size(-2), k.size(-2)
        lowest = torch.full([], torch.finfo(s.dtype).min, dtype=s.dtype)
        s = torch.where(self.causal[:, :, tk - tq : tk, :tk], s, lowest)
        if pad_bias is not None:
            s = s + pad_bias
        y = torch.matmul(nn.functional.softmax(s, dim=-1), v).permute(0, 2, 1, 3).contiguous()
        return self.c_proj(y.view(y.size()[:-2] + (self.width,)))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        w = cfg.hidden_size
        self.ln_1, self.ln_2 = nn.LayerNorm(w), nn.LayerNorm(w)
        self.attn = Attention(cfg)
        self.mlp = nn.Sequential(
            nn.Linear(w, 2 * w), nn.GELU(approximate="tanh"), nn.Linear(2 * w, w)
        )

    def forward(self, x, past=None, pad_bias=None):
        x = x + self.attn(self.ln_1(x), past, pad_bias)
        return x + self.mlp(self.ln_2(x))


class CausalLM(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.config = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.wpe = nn.Embedding(cfg.max_position_embeddings, cfg.hidden_size)
        self.h = nn.ModuleList([Block(cfg) for _ in range(cfg.num_hidden_layers)])
        self.ln_f = nn.LayerNorm(cfg.hidden_size)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # tied input and output embeddings

    def forward(self, input_ids=None, attention_mask=None, past_key_values=None,
                inputs_embeds=None, labels=None):
        x = self.wte(input_ids) if inputs_embeds is None else inputs_embeds
        b, t = x.shape[:2]
        start = 0 if past_key_values is None else past_key_values[0][0].size(-2)
        if attention_mask is None:
            bias = None
        else:  # padded keys get the lowest float added to their scores
            keep = attention_mask.view(b, -1)[:, None, None, :].to(dtype=x.dtype)
            bias = (1.0 - keep) * torch.finfo(x.dtype).min
        x = x + self.wpe(torch.arange(start, start + t, dtype=torch.long).unsqueeze(0))
        for block, past in zip(self.h, past_key_values or [None] * len(self.h)):
            x = block(x, past, bias)
        x = self.ln_f(x)
        logits = self.lm_head(x)
        loss = None
        if labels is not None:
            shifted = logits[..., :-1, :].contiguous()
            targets = labels[..., 1:].contiguous().view(-1)
            loss = nn.CrossEntropyLoss()(shifted.view(-1, shifted.size(-1)), targets)
        return types.SimpleNamespace(loss=loss, logits=logits, hidden_states=(x,))
"""

SMALL = types.SimpleNamespace(
    vocab_size=11, hidden_size=8, num_attention_heads=2, num_hidden_layers=1,
    max_position_embeddings=16, pad_token_id=0,
)  # fmt: skip


# -- preference tuning: DPO and its variants, then a pairwise reward model ------------------------
PREFERENCE_SOURCE = (
    HEADER
    + BASE_LM
    + """

def pad_right(t, length, value):
    if t.size(-1) >= length:
        return t
    shape = list(t.shape)
    shape[-1] = length - t.size(-1)
    return torch.cat([t, value * torch.ones(*shape, dtype=t.dtype)], dim=-1)


def frozen_copy(model):
    ref = copy.deepcopy(model)
    for name, _ in model.named_parameters():
        ref.get_parameter(name).requires_grad = False
    return ref.eval()


def answer_logps(logits, labels, average=False):
    targets = labels[:, 1:].clone()
    logits = logits[:, :-1, :]
    counted = targets != -100
    targets[targets == -100] = 0  # any valid index: these positions are masked out below
    per_token = torch.gather(logits.log_softmax(-1), dim=2, index=targets.unsqueeze(2)).squeeze(2)
    total = (per_token * counted).sum(-1)
    return total / counted.sum(-1) if average else total


def both_answers(model, batch, average):
    longest = max(batch["chosen_input_ids"].shape[1], batch["rejected_input_ids"].shape[1])
    joined = {}
    for key, pad in (("input_ids", 0), ("attention_mask", 0), ("labels", -100)):
        sides = [pad_right(batch[f"{side}_{key}"], longest, pad) for side in ("chosen", "rejected")]
        joined[key] = torch.cat(sides, dim=0)
    logits = model(joined["input_ids"], attention_mask=joined["attention_mask"]).logits
    logps = answer_logps(logits, joined["labels"], average)
    n = batch["chosen_labels"].shape[0]
    return logps[:n], logps[n:], logits[:n], logits[n:]


def preference_loss(kind, beta, smoothing, pi_c, pi_r, ref_c, ref_r):
    z = beta * ((pi_c - pi_r) - (ref_c - ref_r))
    if kind == "sigmoid":
        losses = -F.logsigmoid(z) * (1 - smoothing) - F.logsigmoid(-z) * smoothing
    elif kind == "hinge":
        losses = torch.relu(1 - z)
    elif kind == "ipo":
        losses = (z / beta - 1 / (2 * beta)) ** 2
    else:  # kto_pair: each side against the other side's clamped KL estimate
        kl_c = (pi_c - ref_c).mean().clamp(min=0)
        kl_r = (pi_r - ref_r).mean().clamp(min=0)
        good = 1 - F.sigmoid(beta * ((pi_c - ref_c) - kl_r))
        bad = 1 - F.sigmoid(beta * (kl_c - (pi_r - ref_r)))
        losses = torch.cat((good, bad), 0)
    return losses, beta * (pi_c - ref_c).detach(), beta * (pi_r - ref_r).detach()


policy = CausalLM(config)
initialize(policy)
reference = frozen_copy(policy)
# SGD: the key biases get no gradient (softmax ignores a per-row constant); Adam would scale
# their rounding noise up to full steps
opt = torch.optim.SGD(policy.parameters(), lr=0.5, momentum=0.9)
for kind, smoothing in (("sigmoid", 0.1), ("hinge", 0.0), ("ipo", 0.0), ("kto_pair", 0.0)):
    batch = {k: torch.tensor(v) for k, v in pairs.items()}
    pi_c, pi_r, logits_c, logits_r = both_answers(policy, batch, average=kind == "ipo")
    with torch.no_grad():
        ref_c, ref_r, _, _ = both_answers(reference, batch, average=kind == "ipo")
    losses, won, lost = preference_loss(kind, 0.5, smoothing, pi_c, pi_r, ref_c, ref_r)
    loss = losses.mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    metrics = {
        "accuracy": (won > lost).float().mean().cpu(),
        "margin": (won - lost).mean().cpu(),
        "logits/chosen": logits_c.detach().mean().cpu(),
        "logits/rejected": logits_r.detach().mean().cpu(),
    }
    record.extend([loss.item(), {k: v.numpy() for k, v in metrics.items()}, params_of(policy)])
record.extend([[p.requires_grad for p in reference.parameters()], params_of(reference)])


class RewardModel(nn.Module):
    # a scalar score read at each row's last real token (right padding)
    def __init__(self, cfg):
        super().__init__()
        self.pad_id = cfg.pad_token_id
        self.transformer = CausalLM(cfg)
        self.score = nn.Linear(cfg.hidden_size, 1, bias=False)

    def forward(self, ids, mask):
        scores = self.score(self.transformer(ids, attention_mask=mask).hidden_states[0])
        last = torch.eq(ids, self.pad_id).int().argmax(-1) - 1
        last = last % ids.shape[-1]  # no padding: argmax is 0, and -1 wraps to the final token
        return scores[torch.arange(ids.shape[0]), last]


def pairwise(rm, inputs, center=None):
    good = rm(inputs["chosen_ids"], inputs["chosen_mask"])
    bad = rm(inputs["rejected_ids"], inputs["rejected_mask"])
    gap = good - bad - inputs["margin"] if "margin" in inputs else good - bad
    loss = -nn.functional.logsigmoid(gap).mean()
    if center is not None:  # keeps the scores near zero
        loss += center * torch.mean((good + bad) ** 2)
    return loss, good, bad


rm = RewardModel(config)
initialize(rm)
rm_opt = torch.optim.SGD(rm.parameters(), lr=0.2, momentum=0.9)
for center, with_margin in ((None, False), (0.01, True)):
    inputs = {k: torch.tensor(v) for k, v in ranked.items() if with_margin or k != "margin"}
    loss, _, _ = pairwise(rm, inputs, center)
    rm_opt.zero_grad()
    loss.backward()
    rm_opt.step()
    with torch.no_grad():
        _, good, bad = pairwise(rm, inputs, center)
    odds = torch.stack((good, bad)).mean(dim=2).softmax(dim=0).T
    hits = (odds.argmax(-1) == torch.zeros(odds.shape[0])).float().mean().item()
    record.extend([loss.item(), params_of(rm), odds.numpy(), hits])
"""
)

PREFERENCE_STEPS = [
    HEADER_STEP,
    ("    loss.backward()\n    opt.step()\n", "    grads = loss.backward()\n    opt.step(grads)\n"),
    (
        "    loss.backward()\n    rm_opt.step()\n",
        "    grads = loss.backward()\n    rm_opt.step(grads)\n",
    ),
]


def _preference_pairs(rng):
    """Chosen and rejected answers of different lengths after a shared prompt, labels -100 on
    the prompt and the padding."""
    pairs = {}
    for side, length in (("chosen", 7), ("rejected", 5)):
        ids = rng.integers(1, 11, (2, length))
        ids[:, :2] = [[3, 4], [5, 6]]
        mask = np.ones_like(ids)
        mask[1, length - 2 :] = 0
        ids[mask == 0] = 0
        labels = np.where(mask == 1, ids, -100)
        labels[:, :2] = -100
        pairs.update({f"{side}_input_ids": ids, f"{side}_attention_mask": mask})
        pairs[f"{side}_labels"] = labels
    return pairs


def _ranked_pairs(rng):
    ranked = {}
    for side in ("chosen", "rejected"):
        ids = rng.integers(1, 11, (3, 6))
        ids[0, 4:] = 0  # right padding: the score is read at the last real token
        ids[2, 5:] = 0
        ranked[f"{side}_ids"], ranked[f"{side}_mask"] = ids, (ids != 0).astype(np.int64)
    ranked["margin"] = np.array([[0.5], [0.0], [1.0]], dtype=np.float32)
    return ranked


def test_preference_losses_and_reward_model_train_as_torch(capsys):
    rng = np.random.default_rng(9901)
    pairs, ranked = _preference_pairs(rng), _ranked_pairs(rng)
    (theirs, ours), _ = runs_with_draws(
        PREFERENCE_SOURCE, PREFERENCE_STEPS, capsys, 9901, config=SMALL, pairs=pairs,
        ranked=ranked, initialize=initializer(), params_of=params_of,
    )  # fmt: skip
    assert len(theirs) == 4 * 3 + 2 + 2 * 4
    assert theirs[12] == [False] * len(theirs[12])  # the reference is frozen
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)


# -- PPO with a value head ------------------------------------------------------------------------
PPO_SOURCE = (
    HEADER
    + BASE_LM
    + """

def token_logps(logits, labels=None):
    every = F.log_softmax(logits, dim=2)
    return every if labels is None else torch.gather(every, 2, labels.unsqueeze(2)).squeeze(-1)


def masked_mean(x, mask, axis=None):
    if axis is None:
        return (x * mask).sum() / mask.sum()
    return (x * mask).sum(axis=axis) / mask.sum(axis=axis)


def masked_var(x, mask):
    var = masked_mean((x - masked_mean(x, mask)) ** 2, mask)
    n = mask.sum()
    return var * (n / (n - 1))  # Bessel's correction


def whiten(x, mask, keep_mean=False):
    mean, var = masked_mean(x, mask), masked_var(x, mask)
    out = (x - mean) * torch.rsqrt(var + 1e-8)
    if keep_mean:
        out += mean
    return out


def entropy(logits):
    p = torch.nn.functional.softmax(logits, dim=-1)
    return torch.logsumexp(logits, axis=-1) - torch.sum(p * logits, axis=-1)


class KLCoef:
    # a proportional controller steering the measured KL towards `target`
    def __init__(self, value, target, horizon):
        self.value, self.target, self.horizon = value, target, horizon

    def update(self, kl, n):
        self.value *= 1 + np.clip(kl / self.target - 1, -0.2, 0.2) * n / self.horizon


class WithValueHead(nn.Module):
    def __init__(self, lm, dropout=0.0):
        super().__init__()
        self.lm = lm
        self.drop = nn.Dropout(dropout) if dropout else nn.Identity()
        self.v_head = nn.Linear(lm.config.hidden_size, 1)

    def forward(self, input_ids, attention_mask):
        out = self.lm(input_ids=input_ids, attention_mask=attention_mask)
        return out.logits.float(), self.v_head(self.drop(out.hidden_states[-1])).squeeze(-1)


def rollout(model, queries, responses, inputs):
    logits, values = model(**inputs)
    ids, attn = inputs["input_ids"], inputs["attention_mask"]
    mask = torch.zeros_like(attn)
    mask[:, :-1] = attn[:, 1:]
    for j in range(len(queries)):
        first = len(queries[j]) - 1  # log-probs start at the second token
        if attn[j, 0] == 0:  # left padding shifts the response right
            first += attn[j, :].nonzero()[0]
        mask[j, :first] = 0
        mask[j, first + len(responses[j]) :] = 0
    return token_logps(logits[:, :-1, :], ids[:, 1:]), logits[:, :-1], values[:, :-1], mask[:, :-1]


def kl_estimate(kind, logp, ref):
    if kind == "kl":
        return logp - ref
    if kind == "abs":
        return (logp - ref).abs()
    if kind == "mse":
        return 0.5 * (logp - ref).square()
    return F.kl_div(ref, logp, log_target=True, reduction="none").sum(-1)  # over the vocabulary


def ppo_round(cfg, model, reference, opt, kl_coef, queries, responses, scores, inputs):
    score_t = torch.tensor(scores, dtype=torch.float32)
    with torch.no_grad():
        old_logps, old_logits, values, mask = rollout(model, queries, responses, inputs)
        ref_logps, ref_logits, _, _ = rollout(reference, queries, responses, inputs)
        if cfg.kl_penalty == "full":
            kls = kl_estimate("full", token_logps(old_logits), token_logps(ref_logits))
        else:
            kls = kl_estimate(cfg.kl_penalty, old_logps, ref_logps)
        rows = []
        for kl, m, s in zip(kls, mask, score_t):
            r = -kl_coef.value * kl
            r[m.nonzero()[-1]] += s  # the score lands on the last response token
            rows.append(r)
        rewards = torch.stack(rows) * mask
        values = values * mask
        if cfg.whiten_rewards:
            rewards = whiten(rewards, mask, keep_mean=True)
        running, backwards, n = 0, [], rewards.shape[-1]
        for t in reversed(range(n)):
            ahead = values[:, t + 1] if t < n - 1 else 0.0
            delta = rewards[:, t] + cfg.gamma * ahead - values[:, t]
            running = delta + cfg.gamma * cfg.lam * running
            backwards.append(running)
        advantages = torch.stack(backwards[::-1]).transpose(0, 1)
        returns = advantages + values
        advantages = whiten(advantages, mask).detach()
    stats = []
    for _ in range(cfg.ppo_epochs):
        logps, logits, vpred, _ = rollout(model, queries, responses, inputs)
        lo, hi = values - cfg.cliprange_value, values + cfg.cliprange_value
        vclip = torch.max(torch.min(vpred, hi), lo)
        v_loss = 0.5 * masked_mean(torch.max((vpred - returns) ** 2, (vclip - returns) ** 2), mask)
        ratio = torch.exp(logps - old_logps)
        pg1 = -advantages * ratio
        pg2 = -advantages * torch.clamp(ratio, 1.0 - cfg.cliprange, 1.0 + cfg.cliprange)
        pg_loss = masked_mean(torch.max(pg1, pg2), mask)
        loss = pg_loss + cfg.vf_coef * v_loss
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
        opt.step()
        clipped = masked_mean(torch.gt(pg2, pg1).float(), mask)
        approx_kl = 0.5 * masked_mean((logps - old_logps) ** 2, mask)
        stats += [pg_loss.item(), v_loss.item(), clipped.item(), approx_kl.item()]
        stats += masked_mean(entropy(logits), mask, axis=1).tolist()  # per row
    mean_kl = kls.sum(1).mean()
    kl_coef.update(mean_kl.item(), len(queries))
    return rewards, advantages, returns, stats, mean_kl


policy = WithValueHead(CausalLM(config))
initialize(policy)
reference = WithValueHead(CausalLM(config))
reference.load_state_dict(policy.state_dict())
reference.requires_grad_(False)
reference.eval()
opt = torch.optim.SGD(policy.parameters(), lr=0.1)
kl_coef = KLCoef(0.2, target=6, horizon=10000)
for kl_penalty, whiten_rewards in (("kl", False), ("abs", True), ("mse", False), ("full", False)):
    cfg = types.SimpleNamespace(
        gamma=1.0, lam=0.95, cliprange=0.2, cliprange_value=0.2, vf_coef=0.1, ppo_epochs=2,
        max_grad_norm=0.5, kl_penalty=kl_penalty, whiten_rewards=whiten_rewards,
    )
    inputs = {k: torch.tensor(v) for k, v in raw_inputs.items()}
    out = ppo_round(cfg, policy, reference, opt, kl_coef, queries, responses, scores, inputs)
    rewards, advantages, returns, stats, mean_kl = out
    record.extend([rewards.numpy(), advantages.numpy(), returns.numpy(), stats])
    record.extend([[mean_kl.item(), kl_coef.value], params_of(policy)])
"""
)

PPO_STEPS = [
    HEADER_STEP,
    (
        "        loss.backward()\n"
        "        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)\n"
        "        opt.step()\n",
        "        grads = loss.backward()\n"
        "        torch.nn.utils.clip_grad_norm_(grads, model.parameters(), cfg.max_grad_norm)\n"
        "        opt.step(grads)\n",
    ),
]


def test_ppo_with_value_head_and_kl_penalties_trains_as_torch(capsys):
    rng = np.random.default_rng(9903)
    queries, responses = [[4, 2], [3, 5, 7]], [[6, 1, 9], [2, 8, 8]]
    raw_inputs = {
        "input_ids": np.array([[0, 4, 2, 6, 1, 9], [3, 5, 7, 2, 8, 8]]),  # the first left-padded
        "attention_mask": (np.arange(6) >= [[1], [0]]).astype(np.int64),
    }
    scores = rng.standard_normal(2).astype(np.float32).tolist()
    (theirs, ours), _ = runs_with_draws(
        PPO_SOURCE, PPO_STEPS, capsys, 9903, config=SMALL, raw_inputs=raw_inputs, queries=queries,
        responses=responses, scores=scores, initialize=initializer(), params_of=params_of,
    )  # fmt: skip
    assert len(theirs) == 4 * 6
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)


# -- prefix tuning and prompt tuning --------------------------------------------------------------
ADAPTER_SOURCE = (
    HEADER
    + BASE_LM
    + """

class PrefixTable(torch.nn.Module):
    # keys and values of every layer for each virtual token: from a table, or through an MLP
    def __init__(self, pc):
        super().__init__()
        self.project = pc.prefix_projection
        width = pc.num_layers * 2 * pc.token_dim
        if self.project:
            self.embedding = torch.nn.Embedding(pc.num_virtual_tokens, pc.token_dim)
            self.mlp = torch.nn.Sequential(
                torch.nn.Linear(pc.token_dim, pc.encoder_hidden_size),
                torch.nn.Tanh(),
                torch.nn.Linear(pc.encoder_hidden_size, width),
            )
        else:
            self.embedding = torch.nn.Embedding(pc.num_virtual_tokens, width)

    def forward(self, tokens):
        out = self.embedding(tokens)
        return self.mlp(out) if self.project else out


class SoftPrompt(torch.nn.Module):
    def __init__(self, pc, word_embeddings):
        super().__init__()
        self.embedding = torch.nn.Embedding(pc.num_virtual_tokens, pc.token_dim)
        if pc.init == "vocab":  # start from the embeddings of the first vocabulary entries
            first = torch.LongTensor(list(range(pc.num_virtual_tokens)))
            start = word_embeddings(first).detach().clone()
            self.embedding.weight = torch.nn.Parameter(start.to(torch.float32))

    def forward(self, tokens):
        return self.embedding(tokens)


class PromptTuned(torch.nn.Module):
    def __init__(self, base, pc, name="default"):
        super().__init__()
        self.base, self.pc, self.name = base, pc, name
        for _, child in base.named_children():
            for p in child.parameters():
                p.requires_grad = False
        self.adapters = torch.nn.ModuleDict({})
        encoder = PrefixTable(pc) if pc.kind == "prefix" else SoftPrompt(pc, base.wte)
        self.adapters.update(torch.nn.ModuleDict({name: encoder}))
        self.virtual = torch.arange(pc.num_virtual_tokens).long()

    def virtual_tokens(self, b):
        weight = self.adapters[self.name].embedding.weight
        return self.virtual.unsqueeze(0).expand(b, -1).to(weight.device)

    def prefix_pasts(self, b):
        pc = self.pc
        kv = self.adapters[self.name](self.virtual_tokens(b))
        heads = pc.num_attention_heads
        kv = kv.view(b, pc.num_virtual_tokens, pc.num_layers * 2, heads, pc.token_dim // heads)
        return kv.permute([2, 0, 3, 1, 4]).split(2)  # per layer: (2, b, heads, tokens, head_dim)

    def forward(self, input_ids, attention_mask, labels):
        b, n = input_ids.shape[0], self.pc.num_virtual_tokens
        seen = torch.ones(b, n).to(attention_mask.device)
        attention_mask = torch.cat((seen, attention_mask), dim=1)
        if self.pc.kind == "prefix":
            pasts = self.prefix_pasts(b)
            return self.base(input_ids=input_ids, attention_mask=attention_mask, labels=labels,
                             past_key_values=pasts)
        prompts = self.adapters[self.name](self.virtual_tokens(b)).to(self.base.wte.weight.dtype)
        embeds = torch.cat((prompts, self.base.wte(input_ids)), dim=1)
        labels = torch.cat((torch.full((b, n), -100).to(labels.device), labels), dim=1)
        return self.base(inputs_embeds=embeds, attention_mask=attention_mask, labels=labels)


for pc in adapter_configs:
    base = CausalLM(config)
    initialize(base)
    model = PromptTuned(base, pc)
    initialize(model.adapters)
    record.append([n for n, p in model.named_parameters() if p.requires_grad])
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    for ids, mask in batches:
        ids, mask = torch.tensor(ids), torch.tensor(mask)
        loss = model(ids, mask, ids.masked_fill(mask == 0, -100)).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        record.append(loss.item())
    record.append(params_of(model.adapters))
"""
)

ADAPTER_STEPS = [
    HEADER_STEP,
    (
        "        loss.backward()\n        opt.step()\n",
        "        grads = loss.backward()\n        opt.step(grads)\n",
    ),
]


def test_prefix_and_prompt_tuning_train_as_torch(capsys):
    common = dict(
        token_dim=8, num_layers=2, num_attention_heads=2, num_virtual_tokens=3,
        encoder_hidden_size=6,
    )  # fmt: skip
    adapter_configs = [
        types.SimpleNamespace(kind="prefix", prefix_projection=True, **common),
        types.SimpleNamespace(kind="prefix", prefix_projection=False, **common),
        types.SimpleNamespace(kind="prompt", init="vocab", **common),
    ]
    rng = np.random.default_rng(9904)
    padded = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 1, 0]])
    batches = [(rng.integers(1, 11, (2, 5)), padded) for _ in range(2)]
    config = types.SimpleNamespace(**{**vars(SMALL), "num_hidden_layers": 2})
    (theirs, ours), _ = runs_with_draws(
        ADAPTER_SOURCE, ADAPTER_STEPS, capsys, 9904, config=config,
        adapter_configs=adapter_configs, batches=batches, initialize=initializer(),
        params_of=params_of,
    )  # fmt: skip
    assert theirs[0] == [
        "adapters.default.embedding.weight",
        "adapters.default.mlp.0.weight",
        "adapters.default.mlp.0.bias",
        "adapters.default.mlp.2.weight",
        "adapters.default.mlp.2.bias",
    ]
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)


# -- a Switch router under a Trainer-style loop ---------------------------------------------------
SWITCH_SOURCE = """
import math
from functools import partial
import torch
from torch.nn import functional as F
from torch import nn
from torch.optim import lr_scheduler


def z_loss(logits):
    # pushes the router's log-partition towards 0
    groups, tokens, _ = logits.shape
    return torch.sum(torch.logsumexp(logits, dim=-1) ** 2) / (groups * tokens)


def balance_loss(probs, chosen):
    experts = probs.shape[-1]
    if chosen.dtype != torch.int64:
        chosen = chosen.to(torch.int64)
    if len(chosen.shape) == 2:
        chosen = chosen.unsqueeze(2)
    hits = torch.max(torch.nn.functional.one_hot(chosen, experts), axis=-2).values
    hits = hits.to(torch.float32)
    return torch.mean(torch.mean(hits, axis=-2) * torch.mean(probs, axis=-2)) * experts**2


class Top1Router(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.experts, self.capacity = cfg.num_experts, cfg.expert_capacity
        self.classifier = nn.Linear(cfg.d_model, cfg.num_experts, bias=False)
        self.jitter = cfg.router_jitter_noise
        self.dtype = getattr(torch, cfg.router_dtype)

    def forward(self, x):
        given = x.dtype
        x = x.to(self.dtype)
        if self.training and self.jitter > 0:
            x *= torch.empty_like(x).uniform_(1.0 - self.jitter, 1.0 + self.jitter)
        self.classifier = self.classifier.to(dtype=self.dtype)
        logits = self.classifier(x)
        probs = nn.functional.softmax(logits, dim=-1, dtype=self.dtype).to(given)
        onehot = torch.nn.functional.one_hot(torch.argmax(probs, dim=-1), num_classes=self.experts)
        # each expert takes its first `capacity` tokens of a group; the rest pass through
        onehot = onehot * (torch.cumsum(onehot, dim=-2) <= self.capacity)
        return onehot, torch.max(probs, dim=-1).values.unsqueeze(-1), logits


class SparseMLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.router = Top1Router(cfg)
        self.experts = nn.ModuleDict({})
        for i in range(cfg.num_experts):
            self.experts[f"expert_{i}"] = nn.Sequential(
                nn.Linear(cfg.d_model, cfg.d_ff, bias=False), nn.ReLU(),
                nn.Dropout(cfg.dropout_rate), nn.Linear(cfg.d_ff, cfg.d_model, bias=False),
            )

    def forward(self, x):
        routed, top_prob, logits = self.router(x)
        out = x.clone()  # tokens over capacity keep their input
        for i, expert in enumerate(self.experts.values()):
            picked = routed[:, :, i].bool()
            out[picked] = expert(x[picked]).to(out.dtype)
        return top_prob * out, logits, torch.argmax(routed, dim=-1)


class SwitchLM(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.shared = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.layer_norm = nn.LayerNorm(cfg.d_model)
        self.moe = SparseMLP(cfg)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.lm_head.weight = self.shared.weight  # tied input and output embeddings

    def forward(self, ids, labels):
        h = self.shared(ids)
        moe_out, router_logits, chosen = self.moe(self.layer_norm(h))
        logits = self.lm_head((h + moe_out) * self.cfg.d_model**-0.5)
        flat, flat_labels = logits.view(-1, logits.size(-1)), labels.view(-1)
        # the mean over counted tokens, summed chunk by chunk as a sharded loss would be
        pieces = zip(flat.chunk(2), flat_labels.chunk(2))
        ce = sum(F.cross_entropy(a, b, ignore_index=-100, reduction="sum") for a, b in pieces)
        ce = ce / (flat_labels != -100).sum()
        whole = nn.CrossEntropyLoss(ignore_index=-100)(flat, flat_labels)
        assert torch.allclose(ce, whole, atol=1e-6)
        z = z_loss(router_logits)
        aux = balance_loss(nn.Softmax(dim=-1)(router_logits), chosen)
        return ce + self.cfg.router_z_loss_coef * z + self.cfg.router_aux_loss_coef * aux, z, aux


def warmup_cosine(step, *, warmup, total, cycles):
    if step < warmup:
        return float(step) / float(max(1, warmup))
    progress = float(step - warmup) / float(max(1, total - warmup))
    return max(0.0, 0.5 * (1.0 + math.cos(math.pi * float(cycles) * 2.0 * progress)))


model = SwitchLM(config)
initialize(model)
no_decay = [n for n, _ in model.named_parameters() if "layer_norm" in n or n.endswith("bias")]
named = list(model.named_parameters())
groups = [
    {"params": [p for n, p in named if n not in no_decay and p.requires_grad],
     "weight_decay": 0.01},
    {"params": [p for n, p in named if n in no_decay and p.requires_grad], "weight_decay": 0.0},
]
opt = torch.optim.AdamW(groups, lr=3e-2, betas=(0.9, 0.999), eps=1e-8)
accumulate = 2
lr_of = partial(warmup_cosine, warmup=1, total=len(batches) // accumulate, cycles=0.5)
schedule = lr_scheduler.LambdaLR(opt, lr_of, -1)
model.zero_grad()
for step, (ids, labels) in enumerate(batches):
    model.train()
    loss, z, aux = model(torch.tensor(ids), torch.tensor(labels))
    loss = loss / accumulate
    loss.backward()
    record.append([loss.item(), z.item(), aux.item()])
    if (step + 1) % accumulate == 0:
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        opt.step()
        schedule.step()
        model.zero_grad()
        record.extend([[norm.item(), schedule.get_last_lr()[0]], params_of(model)])
"""

SWITCH_STEPS = [
    HEADER_STEP,
    ("model.zero_grad()\nfor step", "model.zero_grad()\ngrads = None\nfor step"),
    (
        "    loss.backward()\n",
        "    g = loss.backward()\n    grads = g if grads is None else grads + g\n",
    ),
    (
        "clip_grad_norm_(model.parameters(), 0.5)\n        opt.step()\n",
        "clip_grad_norm_(grads, model.parameters(), 0.5)\n        opt.step(grads)\n"
        "        grads = None\n",
    ),
]


def test_switch_router_losses_under_trainer_loop_as_torch(capsys):
    config = types.SimpleNamespace(
        vocab_size=13, d_model=8, d_ff=12, num_experts=3, expert_capacity=4,
        router_jitter_noise=0.0, router_dtype="float32", dropout_rate=0.0,
        router_z_loss_coef=0.001, router_aux_loss_coef=0.01,
    )  # fmt: skip
    rng = np.random.default_rng(9905)
    batches = []
    for _ in range(4):
        ids = rng.integers(0, 13, (2, 6))
        labels = np.roll(ids, -1, axis=1)
        labels[:, -1] = -100
        batches.append((ids, labels))
    (theirs, ours), _ = runs_with_draws(
        SWITCH_SOURCE, SWITCH_STEPS, capsys, 9905, config=config, batches=batches,
        initialize=initializer(), params_of=params_of,
    )  # fmt: skip
    assert len(theirs) == 4 + 2 * 2
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)
