# ruff: noqa: E501  (the programs are kept as their authors wrote them: long lines)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
GRPO as huggingface/trl 0.15 writes it (``trainer/grpo_trainer.py``), trained a few steps over
a tiny left-padded causal LM against torch's run of the same code from the same weights and
uniform draws.

What it exercises: completions sampled by a generation loop as transformers' ``_sample`` writes
it (``prepare_inputs_for_generation``'s ``position_ids = attention_mask.long().cumsum(-1) - 1``
and ``position_ids.masked_fill_(attention_mask == 0, 1)``; the ``RepetitionPenaltyLogitsProcessor``
(``torch.gather``, ``torch.where(score < 0, score * penalty, score / penalty)``,
``scores.scatter``), the temperature and ``TopKLogitsWarper`` (``torch.topk(scores, top_k)[0][...,
-1, None]``, ``masked_fill``); ``unfinished_sequences`` and the padding of finished rows; the
draw itself by inverse CDF over ``torch.rand``); GRPO's ``_prepare_inputs`` (the completion mask
after the first EOS from ``is_eos.int().argmax(dim=1)[is_eos.any(dim=1)]`` written into a
``torch.full`` by a boolean index, the reference log-probs under ``torch.inference_mode()``,
several reward functions weighted and summed, grouped advantages by ``view(-1, G).mean/std`` and
``repeat_interleave``) and ``compute_loss`` (``selective_log_softmax``'s gathered logits minus
``torch.stack([torch.logsumexp(lg, dim=-1) for lg in logits])``, the k3 KL estimator
``exp(ref - logp) - (ref - logp) - 1``, ``torch.exp(logp - logp.detach()) * advantages``).

The lines changed: the ``import`` lines and the gradient lines (``grads = loss.backward()``,
given to ``clip_grad_norm_`` and ``optimizer.step``).
"""

from __future__ import annotations

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


GRPO_SOURCE = """
import copy
from collections import defaultdict

import torch
import torch.nn as nn
import torch.nn.functional as F


class CausalSelfAttention(nn.Module):
    def __init__(self, dim, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.c_attn = nn.Linear(dim, 3 * dim, bias=False)  # a key bias has no true gradient
        self.c_proj = nn.Linear(dim, dim)

    def forward(self, x, attention_bias):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        k = k.view(B, T, self.n_heads, C // self.n_heads).transpose(1, 2)
        q = q.view(B, T, self.n_heads, C // self.n_heads).transpose(1, 2)
        v = v.view(B, T, self.n_heads, C // self.n_heads).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att + attention_bias
        att = F.softmax(att, dim=-1)
        y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class Block(nn.Module):
    def __init__(self, dim, n_heads):
        super().__init__()
        self.ln_1 = nn.LayerNorm(dim)
        self.attn = CausalSelfAttention(dim, n_heads)
        self.ln_2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(approximate="tanh"), nn.Linear(4 * dim, dim))

    def forward(self, x, attention_bias):
        x = x + self.attn(self.ln_1(x), attention_bias)
        x = x + self.mlp(self.ln_2(x))
        return x


class TinyCausalLM(nn.Module):
    def __init__(self, vocab_size, dim, n_heads, n_layers, n_positions):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, dim)
        self.wpe = nn.Embedding(n_positions, dim)
        self.h = nn.ModuleList([Block(dim, n_heads) for _ in range(n_layers)])
        self.ln_f = nn.LayerNorm(dim)
        self.lm_head = nn.Linear(dim, vocab_size, bias=False)

    def forward(self, input_ids, attention_mask, position_ids=None, logits_to_keep=0):
        B, T = input_ids.shape
        if position_ids is None:
            position_ids = attention_mask.long().cumsum(-1) - 1
            position_ids.masked_fill_(attention_mask == 0, 1)
        causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
        allowed = causal[None, None, :, :] & attention_mask[:, None, None, :].bool()
        dtype = self.wte.weight.dtype
        attention_bias = (1.0 - allowed.to(dtype)) * torch.finfo(dtype).min
        x = self.wte(input_ids) + self.wpe(position_ids)
        for block in self.h:
            x = block(x, attention_bias)
        x = self.ln_f(x)
        slice_indices = slice(-logits_to_keep, None)
        return self.lm_head(x[:, slice_indices, :])


class RepetitionPenaltyLogitsProcessor:
    def __init__(self, penalty: float):
        if not isinstance(penalty, float) or not (penalty > 0):
            raise ValueError(f"`penalty` has to be a strictly positive float, but is {penalty}")

        self.penalty = penalty

    def __call__(self, input_ids, scores):
        score = torch.gather(scores, 1, input_ids)

        # if score < 0 then repetition penalty has to be multiplied to reduce the token probabilities
        score = torch.where(score < 0, score * self.penalty, score / self.penalty)

        scores_processed = scores.scatter(1, input_ids, score)
        return scores_processed


class TemperatureLogitsWarper:
    def __init__(self, temperature: float):
        self.temperature = temperature

    def __call__(self, input_ids, scores):
        scores_processed = scores / self.temperature
        return scores_processed


class TopKLogitsWarper:
    def __init__(self, top_k: int, filter_value: float = -float("Inf"), min_tokens_to_keep: int = 1):
        self.top_k = max(top_k, min_tokens_to_keep)
        self.filter_value = filter_value

    def __call__(self, input_ids, scores):
        top_k = min(self.top_k, scores.size(-1))  # Safety check
        # Remove all tokens with a probability less than the last token of the top-k
        indices_to_remove = scores < torch.topk(scores, top_k)[0][..., -1, None]
        scores_processed = scores.masked_fill(indices_to_remove, self.filter_value)
        return scores_processed


@torch.no_grad()
def generate(model, input_ids, attention_mask, max_new_tokens, logits_processors, eos_token_id, pad_token_id):
    batch_size = input_ids.shape[0]
    unfinished_sequences = torch.ones(batch_size, dtype=torch.long)
    for _ in range(max_new_tokens):
        position_ids = attention_mask.long().cumsum(-1) - 1
        position_ids.masked_fill_(attention_mask == 0, 1)
        outputs = model(input_ids, attention_mask, position_ids=position_ids)
        next_token_logits = outputs[:, -1, :].clone().float()
        next_token_scores = next_token_logits
        for processor in logits_processors:
            next_token_scores = processor(input_ids, next_token_scores)
        probs = nn.functional.softmax(next_token_scores, dim=-1)
        # inverse-CDF draw, one uniform per row
        u = torch.rand(batch_size, 1)
        next_tokens = (probs.cumsum(dim=-1) < u).sum(dim=-1).clamp(max=probs.size(-1) - 1)
        # finished sentences should have their next token be a padding token
        next_tokens = next_tokens * unfinished_sequences + pad_token_id * (1 - unfinished_sequences)
        input_ids = torch.cat([input_ids, next_tokens[:, None]], dim=-1)
        attention_mask = torch.cat([attention_mask, attention_mask.new_ones((attention_mask.shape[0], 1))], dim=-1)
        unfinished_sequences = unfinished_sequences & ~(next_tokens == eos_token_id)
        if unfinished_sequences.max() == 0:
            break
    return input_ids


def selective_log_softmax(logits, index):
    if logits.dtype in [torch.float32, torch.float64]:
        selected_logits = torch.gather(logits, dim=-1, index=index.unsqueeze(-1)).squeeze(-1)
        # loop to reduce peak mem consumption
        logsumexp_values = torch.stack([torch.logsumexp(lg, dim=-1) for lg in logits])
        per_token_logps = selected_logits - logsumexp_values  # log_softmax(x_i) = x_i - logsumexp(x)
    else:
        # logsumexp approach is unstable with bfloat16, fall back to slightly less efficent approach
        per_token_logps = []
        for row_logits, row_labels in zip(logits, index):  # loop to reduce peak mem consumption
            row_logps = F.log_softmax(row_logits, dim=-1)
            row_per_token_logps = row_logps.gather(dim=-1, index=row_labels.unsqueeze(-1)).squeeze(-1)
            per_token_logps.append(row_per_token_logps)
        per_token_logps = torch.stack(per_token_logps)
    return per_token_logps


class GRPOTrainer:
    def __init__(self, model, reward_funcs, args, reward_weights=None):
        self.model = model
        self.ref_model = copy.deepcopy(model)
        for param in self.ref_model.parameters():
            param.requires_grad = False
        self.ref_model.eval()
        self.reward_funcs = reward_funcs
        if reward_weights is not None:
            self.reward_weights = torch.tensor(reward_weights, dtype=torch.float32)
        else:
            self.reward_weights = torch.ones(len(reward_funcs), dtype=torch.float32)
        self.num_generations = args.num_generations
        self.max_completion_length = args.max_completion_length
        self.beta = args.beta
        self.args = args
        self.logits_processors = [
            RepetitionPenaltyLogitsProcessor(args.repetition_penalty),
            TemperatureLogitsWarper(args.temperature),
            TopKLogitsWarper(args.top_k),
        ]
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate)
        self._metrics = defaultdict(list)

    def _get_per_token_logps(self, model, input_ids, attention_mask, logits_to_keep):
        # We add 1 to `logits_to_keep` because the last logits of the sequence is later excluded
        logits = model(input_ids=input_ids, attention_mask=attention_mask, logits_to_keep=logits_to_keep + 1)
        logits = logits[:, :-1, :]  # (B, L-1, V), exclude the last logit: it corresponds to the next token pred

        input_ids = input_ids[:, -logits_to_keep:]
        # For transformers<=4.48, logits_to_keep argument isn't supported, so here we drop logits ourselves.
        # See https://github.com/huggingface/trl/issues/2770
        logits = logits[:, -logits_to_keep:]
        return selective_log_softmax(logits, input_ids)  #  compute logprobs for the input tokens

    def _prepare_inputs(self, prompts, prompt_ids, prompt_mask):
        # each prompt repeated num_generations times, as RepeatRandomSampler gives them
        prompt_ids = prompt_ids.repeat_interleave(self.num_generations, dim=0)
        prompt_mask = prompt_mask.repeat_interleave(self.num_generations, dim=0)
        prompts = [p for p in prompts for _ in range(self.num_generations)]

        prompt_completion_ids = generate(
            self.model, prompt_ids, prompt_mask, self.max_completion_length, self.logits_processors,
            eos_token_id=self.args.eos_token_id, pad_token_id=self.args.pad_token_id,
        )

        # Compute prompt length and extract completion ids
        prompt_length = prompt_ids.size(1)
        prompt_ids = prompt_completion_ids[:, :prompt_length]
        completion_ids = prompt_completion_ids[:, prompt_length:]

        # Mask everything after the first EOS token
        is_eos = completion_ids == self.args.eos_token_id
        eos_idx = torch.full((is_eos.size(0),), is_eos.size(1), dtype=torch.long)
        eos_idx[is_eos.any(dim=1)] = is_eos.int().argmax(dim=1)[is_eos.any(dim=1)]
        sequence_indices = torch.arange(is_eos.size(1)).expand(is_eos.size(0), -1)
        completion_mask = (sequence_indices <= eos_idx.unsqueeze(1)).int()

        # Concatenate prompt_mask with completion_mask for logit computation
        attention_mask = torch.cat([prompt_mask, completion_mask], dim=1)  # (B*G, P+C)

        logits_to_keep = completion_ids.size(1)  # we only need to compute the logits for the completion tokens

        with torch.inference_mode():
            ref_per_token_logps = self._get_per_token_logps(
                self.ref_model, prompt_completion_ids, attention_mask, logits_to_keep
            )

        # Decode the generated completions
        completions = [ids[: int(n)] for ids, n in zip(completion_ids.tolist(), completion_mask.sum(1).tolist())]

        rewards_per_func = torch.zeros(len(prompts), len(self.reward_funcs))
        for i, reward_func in enumerate(self.reward_funcs):
            output_reward_func = reward_func(prompts=prompts, completions=completions)
            rewards_per_func[:, i] = torch.tensor(output_reward_func, dtype=torch.float32)

        # Apply weights to each reward function's output and sum
        rewards = (rewards_per_func * self.reward_weights.unsqueeze(0)).sum(dim=1)

        # Compute grouped-wise rewards
        mean_grouped_rewards = rewards.view(-1, self.num_generations).mean(dim=1)
        std_grouped_rewards = rewards.view(-1, self.num_generations).std(dim=1)

        # Normalize the rewards to compute the advantages
        mean_grouped_rewards = mean_grouped_rewards.repeat_interleave(self.num_generations, dim=0)
        std_grouped_rewards = std_grouped_rewards.repeat_interleave(self.num_generations, dim=0)
        advantages = (rewards - mean_grouped_rewards) / (std_grouped_rewards + 1e-4)

        # Log the metrics
        reward_per_func = rewards_per_func.mean(0)
        for i, reward_func in enumerate(self.reward_funcs):
            reward_func_name = reward_func.__name__
            self._metrics[f"rewards/{reward_func_name}"].append(reward_per_func[i].item())

        self._metrics["reward"].append(rewards.mean().item())
        self._metrics["reward_std"].append(std_grouped_rewards.mean().item())

        return {
            "prompt_ids": prompt_ids,
            "prompt_mask": prompt_mask,
            "completion_ids": completion_ids,
            "completion_mask": completion_mask,
            "ref_per_token_logps": ref_per_token_logps,
            "advantages": advantages,
        }

    def compute_loss(self, model, inputs):
        # Compute the per-token log probabilities for the model
        prompt_ids, prompt_mask = inputs["prompt_ids"], inputs["prompt_mask"]
        completion_ids, completion_mask = inputs["completion_ids"], inputs["completion_mask"]
        input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
        attention_mask = torch.cat([prompt_mask, completion_mask], dim=1)
        logits_to_keep = completion_ids.size(1)  # we only need to compute the logits for the completion tokens

        per_token_logps = self._get_per_token_logps(model, input_ids, attention_mask, logits_to_keep)

        # Compute the KL divergence between the model and the reference model
        ref_per_token_logps = inputs["ref_per_token_logps"]
        per_token_kl = torch.exp(ref_per_token_logps - per_token_logps) - (ref_per_token_logps - per_token_logps) - 1

        # x - x.detach() allows for preserving gradients from x
        advantages = inputs["advantages"]
        per_token_loss = torch.exp(per_token_logps - per_token_logps.detach()) * advantages.unsqueeze(1)
        per_token_loss = -(per_token_loss - self.beta * per_token_kl)
        loss = ((per_token_loss * completion_mask).sum(dim=1) / completion_mask.sum(dim=1)).mean()

        # Log the metrics
        completion_length = completion_mask.sum(1).float().mean().item()
        self._metrics["completion_length"].append(completion_length)

        mean_kl = ((per_token_kl * completion_mask).sum(dim=1) / completion_mask.sum(dim=1)).mean()
        self._metrics["kl"].append(mean_kl.item())

        return loss

    def training_step(self, prompts, prompt_ids, prompt_mask):
        self.model.train()
        inputs = self._prepare_inputs(prompts, prompt_ids, prompt_mask)
        loss = self.compute_loss(self.model, inputs)
        self.optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.args.max_grad_norm)
        self.optimizer.step()
        return loss.detach(), inputs


def reward_len(prompts, completions, **kwargs):
    return [-abs(6 - len(c)) / 3.0 for c in completions]


def reward_token_three(prompts, completions, **kwargs):
    return [sum(t == 3 for t in c) / max(len(c), 1) for c in completions]


def reward_ends_with_eos(prompts, completions, **kwargs):
    return [1.0 if c and c[-1] == EOS else 0.0 for c in completions]
"""

TRAIN_SOURCE = """
from types import SimpleNamespace

EOS, PAD = 1, 0
model = TinyCausalLM(vocab_size=10, dim=16, n_heads=2, n_layers=2, n_positions=16)
initialize(model)
args = SimpleNamespace(
    num_generations=3, max_completion_length=6, beta=beta, repetition_penalty=1.3,
    temperature=0.9, top_k=6, learning_rate=3e-2, max_grad_norm=1.0,
    eos_token_id=EOS, pad_token_id=PAD,
)
trainer = GRPOTrainer(model, [reward_len, reward_token_three, reward_ends_with_eos], args, reward_weights=[1.0, 2.0, 0.5])
prompts = ["a", "b"]
prompt_ids = torch.tensor([[PAD, 4, 5, 6], [7, 2, 8, 3]])  # left-padded, as the tokenizer pads for generation
prompt_mask = torch.tensor([[0, 1, 1, 1], [1, 1, 1, 1]])
for step in range(3):
    loss, inputs = trainer.training_step(prompts, prompt_ids, prompt_mask)
    record.append(inputs["completion_ids"].tolist())
    record.append(inputs["completion_mask"].tolist())
    record.append(inputs["advantages"].numpy())
    record.append(inputs["ref_per_token_logps"].numpy())
    record.append(loss.item())
    record.append(params_of(model))
record.append({k: np.array(v) for k, v in trainer._metrics.items()})
"""

STEPS = [
    ("\nimport torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n",
     "\nimport retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.nn.functional as F\n"),
    ("        loss.backward()\n        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.args.max_grad_norm)\n        self.optimizer.step()\n",
     "        grads = loss.backward()\n        torch.nn.utils.clip_grad_norm_(grads, self.model.parameters(), self.args.max_grad_norm)\n        self.optimizer.step(grads)\n"),
]  # fmt: skip


@pytest.mark.parametrize("beta", [0.04, 0.0])
def test_trl_grpo_samples_groups_rewards_and_trains_as_torch(capsys, beta):
    (theirs, ours), _ = runs_with_draws(
        GRPO_SOURCE + TRAIN_SOURCE, STEPS, capsys, 24301,
        beta=beta, initialize=initializer(), params_of=params_of,
    )  # fmt: skip
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)
