# ruff: noqa: E501  (the programs are kept as their authors wrote them: long lines)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
LLM fine-tuning as its libraries write it, each trained a few steps against torch's run of the
same code from the same weights and draws, over a small GPT-2 of ``modeling_gpt2.py``'s eager
attention (an additive ``(1.0 - attention_mask) * torch.finfo(dtype).min`` padding mask, the
``layer_past`` tuple of keys and values, ``inputs_embeds``).

- DPO as huggingface/trl 0.7 writes it (``trainer/dpo_trainer.py``: ``concatenated_inputs``
  with ``pad_to_length``, ``concatenated_forward``, ``get_batch_logps``'s ``labels[labels ==
  label_pad_token_id] = 0`` and ``torch.gather(logits.log_softmax(-1), dim=2, index=...)``,
  ``dpo_loss`` for the sigmoid (label-smoothed), hinge, IPO and KTO-pair losses, the metrics of
  ``get_batch_loss_metrics``) with the frozen reference of ``models/modeling_base.py``'s
  ``create_reference_model`` (``deepcopy``, ``get_parameter(name).requires_grad = False``,
  ``eval()``) run under ``torch.no_grad()``.
- the reward model of trl's ``RewardTrainer.compute_loss`` (``-nn.functional.logsigmoid(
  rewards_chosen - rewards_rejected - inputs["margin"]).mean()`` plus the
  ``center_rewards_coefficient`` term) on ``GPT2ForSequenceClassification``'s pooling
  (``torch.eq(input_ids, pad_token_id).int().argmax(-1) - 1``, ``% input_ids.shape[-1]``,
  ``logits[torch.arange(batch_size), sequence_lengths]``).
- PPO for language models as trl 0.7 writes it (``trainer/ppo_trainer.py``'s
  ``batched_forward_pass`` masks, ``compute_rewards`` with ``mask.nonzero()[-1]`` and the KL
  penalties ``kl``/``abs``/``mse``/``full`` (``F.kl_div(..., log_target=True,
  reduction="none")``), ``compute_advantages``' reversed GAE and ``masked_whiten``, ``loss``'s
  clipped value and ratio losses with ``clip_by_value``'s ``torch.max(torch.min(x, tensor_max),
  tensor_min)``, ``AdaptiveKLController``; ``core.py``'s ``logprobs_from_logits``,
  ``masked_mean``/``masked_var``, ``entropy_from_logits``; ``modeling_value_head.py``'s
  ``ValueHead``) with ``clip_grad_norm_``.
- prefix tuning and prompt tuning as huggingface/peft writes them (``tuners/prefix_tuning/
  model.py``'s ``PrefixEncoder`` with and without ``prefix_projection``, ``tuners/
  prompt_tuning/model.py``'s ``PromptEmbedding``, ``peft_model.py``'s ``get_prompt`` (``view``
  into ``(batch, tokens, layers * 2, heads, head_dim)``, ``permute([2, 0, 3, 1, 4]).split(2)``,
  each split unpacked by ``past_key, past_value = layer_past``) and ``PeftModelForCausalLM
  .forward``'s prefixed attention mask and ``-100`` labels), the base frozen parameter by
  parameter.
- Switch Transformers' router as transformers writes it (``modeling_switch_transformers.py``:
  ``SwitchTransformersTop1Router`` with ``torch.cumsum`` of the one-hot over the expert capacity,
  ``SwitchTransformersSparseMLP``'s ``next_states[token_indices] = expert(...)`` over an
  ``nn.ModuleDict``, ``router_z_loss_func``, ``load_balancing_loss_func``'s ``torch.max(
  expert_mask, axis=-2).values``), trained by the loop of ``Trainer`` with gradient
  accumulation, ``get_cosine_schedule_with_warmup``'s ``LambdaLR`` and ``clip_grad_norm_``.

The lines changed: the ``import`` lines and the gradient lines (``grads = loss.backward()``,
summed over accumulation steps, given to ``clip_grad_norm_`` and ``optimizer.step``).
"""

from __future__ import annotations

import random
import types

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


TINY_GPT2_SOURCE = """
class GPT2Attention(nn.Module):
    def __init__(self, config):
        super().__init__()
        max_positions = config.max_position_embeddings
        self.register_buffer(
            "bias",
            torch.tril(torch.ones((max_positions, max_positions), dtype=torch.bool)).view(
                1, 1, max_positions, max_positions
            ),
            persistent=False,
        )
        self.embed_dim = config.hidden_size
        self.num_heads = config.num_attention_heads
        self.head_dim = self.embed_dim // self.num_heads
        self.c_attn = nn.Linear(self.embed_dim, 3 * self.embed_dim)
        self.c_proj = nn.Linear(self.embed_dim, self.embed_dim)

    def _attn(self, query, key, value, attention_mask=None):
        attn_weights = torch.matmul(query, key.transpose(-1, -2))
        attn_weights = attn_weights / torch.full(
            [], value.size(-1) ** 0.5, dtype=attn_weights.dtype, device=attn_weights.device
        )
        query_length, key_length = query.size(-2), key.size(-2)
        causal_mask = self.bias[:, :, key_length - query_length : key_length, :key_length]
        mask_value = torch.finfo(attn_weights.dtype).min
        # Need to be a tensor, otherwise we get error: `RuntimeError: expected scalar type float but found double`.
        # Need to be on the same device, otherwise `RuntimeError: ..., x and y to be on the same device`
        mask_value = torch.full([], mask_value, dtype=attn_weights.dtype, device=attn_weights.device)
        attn_weights = torch.where(causal_mask, attn_weights.to(attn_weights.dtype), mask_value)
        if attention_mask is not None:
            # Apply the attention mask
            attn_weights = attn_weights + attention_mask
        attn_weights = nn.functional.softmax(attn_weights, dim=-1)
        attn_output = torch.matmul(attn_weights, value)
        return attn_output

    def _split_heads(self, tensor, num_heads, attn_head_size):
        new_shape = tensor.size()[:-1] + (num_heads, attn_head_size)
        tensor = tensor.view(new_shape)
        return tensor.permute(0, 2, 1, 3)  # (batch, head, seq_length, head_features)

    def _merge_heads(self, tensor, num_heads, attn_head_size):
        tensor = tensor.permute(0, 2, 1, 3).contiguous()
        new_shape = tensor.size()[:-2] + (num_heads * attn_head_size,)
        return tensor.view(new_shape)

    def forward(self, hidden_states, layer_past=None, attention_mask=None):
        query, key, value = self.c_attn(hidden_states).split(self.embed_dim, dim=2)
        query = self._split_heads(query, self.num_heads, self.head_dim)
        key = self._split_heads(key, self.num_heads, self.head_dim)
        value = self._split_heads(value, self.num_heads, self.head_dim)
        if layer_past is not None:
            past_key, past_value = layer_past
            key = torch.cat((past_key, key), dim=-2)
            value = torch.cat((past_value, value), dim=-2)
        attn_output = self._attn(query, key, value, attention_mask)
        attn_output = self._merge_heads(attn_output, self.num_heads, self.head_dim)
        attn_output = self.c_proj(attn_output)
        return attn_output


class GPT2Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.hidden_size)
        self.attn = GPT2Attention(config)
        self.ln_2 = nn.LayerNorm(config.hidden_size)
        self.mlp = nn.Sequential(nn.Linear(config.hidden_size, 2 * config.hidden_size), nn.GELU(approximate="tanh"), nn.Linear(2 * config.hidden_size, config.hidden_size))

    def forward(self, hidden_states, layer_past=None, attention_mask=None):
        hidden_states = hidden_states + self.attn(self.ln_1(hidden_states), layer_past=layer_past, attention_mask=attention_mask)
        return hidden_states + self.mlp(self.ln_2(hidden_states))


class GPT2LMHeadModel(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.hidden_size)
        self.wpe = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.h = nn.ModuleList([GPT2Block(config) for _ in range(config.num_hidden_layers)])
        self.ln_f = nn.LayerNorm(config.hidden_size)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, input_ids=None, attention_mask=None, past_key_values=None, inputs_embeds=None, labels=None):
        if inputs_embeds is None:
            inputs_embeds = self.wte(input_ids)
        batch_size, input_length = inputs_embeds.shape[:2]
        if past_key_values is None:
            past_length = 0
            past_key_values = tuple([None] * len(self.h))
        else:
            past_length = past_key_values[0][0].size(-2)
        position_ids = torch.arange(past_length, input_length + past_length, dtype=torch.long)
        position_ids = position_ids.unsqueeze(0)
        # GPT2Attention mask.
        if attention_mask is not None:
            attention_mask = attention_mask.view(batch_size, -1)
            attention_mask = attention_mask[:, None, None, :]
            attention_mask = attention_mask.to(dtype=inputs_embeds.dtype)  # fp16 compatibility
            attention_mask = (1.0 - attention_mask) * torch.finfo(inputs_embeds.dtype).min
        hidden_states = inputs_embeds + self.wpe(position_ids)
        for block, layer_past in zip(self.h, past_key_values):
            hidden_states = block(hidden_states, layer_past=layer_past, attention_mask=attention_mask)
        hidden_states = self.ln_f(hidden_states)
        lm_logits = self.lm_head(hidden_states)
        loss = None
        if labels is not None:
            # Shift so that tokens < n predict n
            shift_logits = lm_logits[..., :-1, :].contiguous()
            shift_labels = labels[..., 1:].contiguous()
            # Flatten the tokens
            loss_fct = nn.CrossEntropyLoss()
            loss = loss_fct(shift_logits.view(-1, shift_logits.size(-1)), shift_labels.view(-1))
        return SimpleNamespace(loss=loss, logits=lm_logits, hidden_states=(hidden_states,))
"""

IMPORTS = """
from copy import deepcopy
from types import SimpleNamespace
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
"""

IMPORT_STEP = (
    "\nimport torch\nimport torch.nn.functional as F\nfrom torch import nn\n",
    "\nimport retrograd as torch\nimport retrograd.nn.functional as F\nfrom retrograd import nn\n",
)

SMALL = types.SimpleNamespace(
    vocab_size=11, hidden_size=8, num_attention_heads=2, num_hidden_layers=1,
    max_position_embeddings=16,
)  # fmt: skip


# -- DPO, IPO, KTO-pair ------------------------------------------------------------------------------
DPO_SOURCE = (
    IMPORTS
    + TINY_GPT2_SOURCE
    + """

def pad_to_length(tensor, length, pad_value, dim=-1):
    if tensor.size(dim) >= length:
        return tensor
    else:
        pad_size = list(tensor.shape)
        pad_size[dim] = length - tensor.size(dim)
        return torch.cat(
            [
                tensor,
                pad_value * torch.ones(*pad_size, dtype=tensor.dtype, device=tensor.device),
            ],
            dim=dim,
        )


def create_reference_model(model, num_shared_layers=None, pattern=None):
    parameter_names = [n for n, _ in model.named_parameters()]
    ref_model = deepcopy(model)

    # if no layers are shared, return copy of model
    if num_shared_layers is None:
        for param_name in parameter_names:
            param = ref_model.get_parameter(param_name)
            param.requires_grad = False
        return ref_model.eval()


class DPOTrainer:
    def __init__(self, model, ref_model, beta, loss_type, label_smoothing=0.0, label_pad_token_id=-100, padding_value=0):
        self.model = model
        self.ref_model = ref_model
        self.beta = beta
        self.loss_type = loss_type
        self.label_smoothing = label_smoothing
        self.label_pad_token_id = label_pad_token_id
        self.padding_value = padding_value
        self.is_encoder_decoder = False

    @staticmethod
    def concatenated_inputs(batch, is_encoder_decoder=False, label_pad_token_id=-100, padding_value=0, device=None):
        concatenated_batch = {}

        if is_encoder_decoder:
            max_length = max(batch["chosen_labels"].shape[1], batch["rejected_labels"].shape[1])
        else:
            max_length = max(batch["chosen_input_ids"].shape[1], batch["rejected_input_ids"].shape[1])

        for k in batch:
            if k.startswith("chosen") and isinstance(batch[k], torch.Tensor):
                if "labels" in k or is_encoder_decoder:
                    pad_value = label_pad_token_id
                elif k.endswith("_input_ids"):
                    pad_value = padding_value
                elif k.endswith("_attention_mask"):
                    pad_value = 0
                concatenated_key = k.replace("chosen", "concatenated")
                concatenated_batch[concatenated_key] = pad_to_length(batch[k], max_length, pad_value=pad_value)
        for k in batch:
            if k.startswith("rejected") and isinstance(batch[k], torch.Tensor):
                if "labels" in k or is_encoder_decoder:
                    pad_value = label_pad_token_id
                elif k.endswith("_input_ids"):
                    pad_value = padding_value
                elif k.endswith("_attention_mask"):
                    pad_value = 0
                concatenated_key = k.replace("rejected", "concatenated")
                concatenated_batch[concatenated_key] = torch.cat(
                    (
                        concatenated_batch[concatenated_key],
                        pad_to_length(batch[k], max_length, pad_value=pad_value),
                    ),
                    dim=0,
                ).to(device=device)

        return concatenated_batch

    def dpo_loss(self, policy_chosen_logps, policy_rejected_logps, reference_chosen_logps, reference_rejected_logps, reference_free=False):
        pi_logratios = policy_chosen_logps - policy_rejected_logps
        if reference_free:
            ref_logratios = torch.tensor([0], dtype=pi_logratios.dtype, device=pi_logratios.device)
        else:
            ref_logratios = reference_chosen_logps - reference_rejected_logps

        logits = pi_logratios - ref_logratios

        # The beta is a temperature parameter for the DPO loss, typically something in the range of 0.1 to 0.5.
        # We ignore the reference model as beta -> 0. The label_smoothing parameter encodes our uncertainty about the labels and
        # calculates a conservative DPO loss.
        if self.loss_type == "sigmoid":
            losses = (
                -F.logsigmoid(self.beta * logits) * (1 - self.label_smoothing)
                - F.logsigmoid(-self.beta * logits) * self.label_smoothing
            )
        elif self.loss_type == "hinge":
            losses = torch.relu(1 - self.beta * logits)
        elif self.loss_type == "ipo":
            # eqn (17) of the paper where beta is the regularization parameter for the IPO loss, denoted by tau in the paper.
            losses = (logits - 1 / (2 * self.beta)) ** 2
        elif self.loss_type == "kto_pair":
            # eqn (7) of the HALOs paper
            chosen_KL = (policy_chosen_logps - reference_chosen_logps).mean().clamp(min=0)
            rejected_KL = (policy_rejected_logps - reference_rejected_logps).mean().clamp(min=0)

            chosen_logratios = policy_chosen_logps - reference_chosen_logps
            rejected_logratios = policy_rejected_logps - reference_rejected_logps
            # As described in the KTO report, the KL term for chosen (rejected) is estimated using the rejected (chosen) half.
            losses = torch.cat(
                (
                    1 - F.sigmoid(self.beta * (chosen_logratios - rejected_KL)),
                    1 - F.sigmoid(self.beta * (chosen_KL - rejected_logratios)),
                ),
                0,
            )
        else:
            raise ValueError(
                f"Unknown loss type: {self.loss_type}. Should be one of ['sigmoid', 'hinge', 'ipo', 'kto_pair']"
            )

        chosen_rewards = self.beta * (policy_chosen_logps - reference_chosen_logps).detach()
        rejected_rewards = self.beta * (policy_rejected_logps - reference_rejected_logps).detach()

        return losses, chosen_rewards, rejected_rewards

    @staticmethod
    def get_batch_logps(logits, labels, average_log_prob=False, label_pad_token_id=-100, is_encoder_decoder=False):
        if logits.shape[:-1] != labels.shape:
            raise ValueError("Logits (batch and sequence length dim) and labels must have the same shape.")

        if not is_encoder_decoder:
            labels = labels[:, 1:].clone()
            logits = logits[:, :-1, :]
        loss_mask = labels != label_pad_token_id

        # dummy token; we'll ignore the losses on these tokens later
        labels[labels == label_pad_token_id] = 0

        per_token_logps = torch.gather(logits.log_softmax(-1), dim=2, index=labels.unsqueeze(2)).squeeze(2)

        if average_log_prob:
            return (per_token_logps * loss_mask).sum(-1) / loss_mask.sum(-1)
        else:
            return (per_token_logps * loss_mask).sum(-1)

    def concatenated_forward(self, model, batch):
        concatenated_batch = self.concatenated_inputs(
            batch,
            is_encoder_decoder=self.is_encoder_decoder,
            label_pad_token_id=self.label_pad_token_id,
            padding_value=self.padding_value,
        )
        len_chosen = batch["chosen_labels"].shape[0]

        all_logits = model(
            concatenated_batch["concatenated_input_ids"],
            attention_mask=concatenated_batch["concatenated_attention_mask"],
        ).logits

        all_logps = self.get_batch_logps(
            all_logits,
            concatenated_batch["concatenated_labels"],
            average_log_prob=self.loss_type == "ipo",
            is_encoder_decoder=self.is_encoder_decoder,
            label_pad_token_id=self.label_pad_token_id,
        )

        chosen_logps = all_logps[:len_chosen]
        rejected_logps = all_logps[len_chosen:]

        chosen_logits = all_logits[:len_chosen]
        rejected_logits = all_logits[len_chosen:]

        return (chosen_logps, rejected_logps, chosen_logits, rejected_logits)

    def get_batch_loss_metrics(self, model, batch, train_eval="train"):
        metrics = {}

        (
            policy_chosen_logps,
            policy_rejected_logps,
            policy_chosen_logits,
            policy_rejected_logits,
        ) = self.concatenated_forward(model, batch)

        with torch.no_grad():
            (
                reference_chosen_logps,
                reference_rejected_logps,
                _,
                _,
            ) = self.concatenated_forward(self.ref_model, batch)

        losses, chosen_rewards, rejected_rewards = self.dpo_loss(
            policy_chosen_logps,
            policy_rejected_logps,
            reference_chosen_logps,
            reference_rejected_logps,
        )
        reward_accuracies = (chosen_rewards > rejected_rewards).float()

        prefix = "eval_" if train_eval == "eval" else ""
        metrics[f"{prefix}rewards/chosen"] = chosen_rewards.mean().cpu()
        metrics[f"{prefix}rewards/rejected"] = rejected_rewards.mean().cpu()
        metrics[f"{prefix}rewards/accuracies"] = reward_accuracies.mean().cpu()
        metrics[f"{prefix}rewards/margins"] = (chosen_rewards - rejected_rewards).mean().cpu()
        metrics[f"{prefix}logps/rejected"] = policy_rejected_logps.detach().mean().cpu()
        metrics[f"{prefix}logps/chosen"] = policy_chosen_logps.detach().mean().cpu()
        metrics[f"{prefix}logits/rejected"] = policy_rejected_logits.detach().mean().cpu()
        metrics[f"{prefix}logits/chosen"] = policy_chosen_logits.detach().mean().cpu()

        return losses.mean(), metrics


model = GPT2LMHeadModel(config)
initialize(model)
ref_model = create_reference_model(model)
# SGD: the key biases have no gradient (softmax ignores a constant per row), which RMSprop would scale up from rounding
optimizer = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
for loss_type, label_smoothing in (("sigmoid", 0.1), ("hinge", 0.0), ("ipo", 0.0), ("kto_pair", 0.0)):
    trainer = DPOTrainer(model, ref_model, beta=0.5, loss_type=loss_type, label_smoothing=label_smoothing)
    batch = {k: torch.tensor(v) for k, v in raw_batch.items()}
    loss, metrics = trainer.get_batch_loss_metrics(model, batch)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    record.append(loss.item())
    record.append({k: v.numpy() for k, v in metrics.items()})
    record.append(params_of(model))
record.append([p.requires_grad for p in ref_model.parameters()])
record.append(params_of(ref_model))
"""
)

STEP_STEPS = [
    IMPORT_STEP,
    (
        "    loss.backward()\n    optimizer.step()\n",
        "    grads = loss.backward()\n    optimizer.step(grads)\n",
    ),
]


def _preference_batch(rng):
    """Chosen and rejected answers of different lengths after a shared prompt (labels -100 on
    the prompt and the padding), as trl's ``DPODataCollatorWithPadding`` pads them."""
    batch = {}
    for side, length in (("chosen", 7), ("rejected", 5)):
        ids = rng.integers(1, 11, (2, length))
        ids[:, :2] = [[3, 4], [5, 6]]
        mask = np.ones_like(ids)
        mask[1, length - 2 :] = 0
        ids[mask == 0] = 0
        labels = np.where(mask == 1, ids, -100)
        labels[:, :2] = -100
        batch.update(
            {f"{side}_input_ids": ids, f"{side}_attention_mask": mask, f"{side}_labels": labels}
        )
    return batch


def test_trl_dpo_ipo_kto_losses_train_as_torch(capsys):
    raw_batch = _preference_batch(np.random.default_rng(9901))
    (theirs, ours), _ = runs_with_draws(
        DPO_SOURCE, STEP_STEPS, capsys, 9901, config=SMALL, raw_batch=raw_batch,
        initialize=initializer(), params_of=params_of,
    )  # fmt: skip
    assert theirs[-2] == [False] * len(theirs[-2])
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)


# -- the reward model --------------------------------------------------------------------------------
REWARD_SOURCE = (
    IMPORTS
    + TINY_GPT2_SOURCE
    + """

class GPT2ForSequenceClassification(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.num_labels = config.num_labels
        self.config = config
        self.transformer = GPT2LMHeadModel(config)
        self.score = nn.Linear(config.hidden_size, self.num_labels, bias=False)

    def forward(self, input_ids=None, attention_mask=None, return_dict=None):
        transformer_outputs = self.transformer(input_ids, attention_mask=attention_mask)
        hidden_states = transformer_outputs.hidden_states[0]
        logits = self.score(hidden_states)

        if input_ids is not None:
            batch_size, sequence_length = input_ids.shape[:2]

        if self.config.pad_token_id is None and batch_size != 1:
            raise ValueError("Cannot handle batch sizes > 1 if no padding token is defined.")
        if self.config.pad_token_id is None:
            sequence_lengths = -1
        else:
            if input_ids is not None:
                # if no pad token found, use modulo instead of reverse indexing for ONNX compatibility
                sequence_lengths = torch.eq(input_ids, self.config.pad_token_id).int().argmax(-1) - 1
                sequence_lengths = sequence_lengths % input_ids.shape[-1]
                sequence_lengths = sequence_lengths.to(logits.device)
            else:
                sequence_lengths = -1

        pooled_logits = logits[torch.arange(batch_size, device=logits.device), sequence_lengths]
        return {"logits": pooled_logits}


class RewardTrainer:
    def __init__(self, model, optimizer, center_rewards_coefficient=None):
        self.model = model
        self.optimizer = optimizer
        self.args = SimpleNamespace(center_rewards_coefficient=center_rewards_coefficient)

    def compute_loss(self, model, inputs, return_outputs=False):
        rewards_chosen = model(
            input_ids=inputs["input_ids_chosen"],
            attention_mask=inputs["attention_mask_chosen"],
            return_dict=True,
        )["logits"]
        rewards_rejected = model(
            input_ids=inputs["input_ids_rejected"],
            attention_mask=inputs["attention_mask_rejected"],
            return_dict=True,
        )["logits"]
        # calculate loss, optionally modulate with margin
        if "margin" in inputs:
            loss = -nn.functional.logsigmoid(rewards_chosen - rewards_rejected - inputs["margin"]).mean()
        else:
            loss = -nn.functional.logsigmoid(rewards_chosen - rewards_rejected).mean()

        if self.args.center_rewards_coefficient is not None:
            loss += self.args.center_rewards_coefficient * torch.mean((rewards_chosen + rewards_rejected) ** 2)

        if return_outputs:
            return loss, {
                "rewards_chosen": rewards_chosen,
                "rewards_rejected": rewards_rejected,
            }
        return loss

    def prediction_step(self, model, inputs):
        with torch.no_grad():
            loss, logits_dict = self.compute_loss(model, inputs, return_outputs=True)
        logits = tuple(v for k, v in logits_dict.items() if k not in [])
        logits = torch.stack(logits).mean(dim=2).softmax(dim=0).T
        labels = torch.zeros(logits.shape[0])
        return loss, logits, labels


model = GPT2ForSequenceClassification(config)
initialize(model)
# SGD: the key biases have no gradient (softmax ignores a constant per row), which AdamW would scale up from rounding
optimizer = torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.9)
for center, use_margin in ((None, False), (0.01, True)):
    trainer = RewardTrainer(model, optimizer, center_rewards_coefficient=center)
    inputs = {k: torch.tensor(v) for k, v in raw_inputs.items() if use_margin or k != "margin"}
    loss = trainer.compute_loss(model, inputs)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    record.append(loss.item())
    record.append(params_of(model))
    eval_loss, logits, labels = trainer.prediction_step(model, inputs)
    record.append(logits.numpy())
    record.append((logits.argmax(-1) == labels).float().mean().item())
"""
)


def test_trl_reward_model_pairwise_loss_trains_as_torch(capsys):
    config = types.SimpleNamespace(**vars(SMALL), num_labels=1, pad_token_id=0)
    rng = np.random.default_rng(9902)
    raw_inputs = {}
    for side in ("chosen", "rejected"):
        ids = rng.integers(1, 11, (3, 6))
        ids[0, 4:] = 0  # right padding: the score is read at the last real token
        ids[2, 5:] = 0
        raw_inputs[f"input_ids_{side}"] = ids
        raw_inputs[f"attention_mask_{side}"] = (ids != 0).astype(np.int64)
    raw_inputs["margin"] = np.array([[0.5], [0.0], [1.0]], dtype=np.float32)
    (theirs, ours), _ = runs_with_draws(
        REWARD_SOURCE, STEP_STEPS, capsys, 9902, config=config, raw_inputs=raw_inputs,
        initialize=initializer(), params_of=params_of,
    )  # fmt: skip
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)


# -- PPO for language models -------------------------------------------------------------------------
PPO_SOURCE = (
    IMPORTS
    + TINY_GPT2_SOURCE
    + '''

def logprobs_from_logits(logits, labels, gather=True):
    """
    See: https://github.com/pytorch/pytorch/issues/563#issuecomment-330103591
    """
    logp = F.log_softmax(logits, dim=2)

    if not gather:
        return logp
    logpy = torch.gather(logp, 2, labels.unsqueeze(2)).squeeze(-1)
    return logpy


def masked_mean(values, mask, axis=None):
    """Compute mean of tensor with a masked values."""
    if axis is not None:
        return (values * mask).sum(axis=axis) / mask.sum(axis=axis)
    else:
        return (values * mask).sum() / mask.sum()


def masked_var(values, mask, unbiased=True):
    """Compute variance of tensor with masked values."""
    mean = masked_mean(values, mask)
    centered_values = values - mean
    variance = masked_mean(centered_values**2, mask)
    if unbiased:
        mask_sum = mask.sum()
        if mask_sum == 0:
            raise ValueError(
                "The sum of the mask is zero, which can happen when `mini_batch_size=1`;"
                "try increase the `mini_batch_size` or `gradient_accumulation_steps`"
            )
        # note that if mask_sum == 1, then there is a division by zero issue
        # to avoid it you just need to use a larger minibatch_size
        bessel_correction = mask_sum / (mask_sum - 1)
        variance = variance * bessel_correction
    return variance


def masked_whiten(values, mask, shift_mean=True):
    """Whiten values with masked values."""
    mean, var = masked_mean(values, mask), masked_var(values, mask)
    whitened = (values - mean) * torch.rsqrt(var + 1e-8)
    if not shift_mean:
        whitened += mean
    return whitened


def clip_by_value(x, tensor_min, tensor_max):
    """
    Tensor extenstion to torch.clamp
    https://github.com/pytorch/pytorch/issues/2793#issuecomment-428784713
    """
    clipped = torch.max(torch.min(x, tensor_max), tensor_min)
    return clipped


def entropy_from_logits(logits):
    """Calculate entropy from logits."""
    pd = torch.nn.functional.softmax(logits, dim=-1)
    entropy = torch.logsumexp(logits, axis=-1) - torch.sum(pd * logits, axis=-1)
    return entropy


class AdaptiveKLController:
    """
    Adaptive KL controller described in the paper:
    https://arxiv.org/pdf/1909.08593.pdf
    """

    def __init__(self, init_kl_coef, target, horizon):
        self.value = init_kl_coef
        self.target = target
        self.horizon = horizon

    def update(self, current, n_steps):
        target = self.target
        proportional_error = np.clip(current / target - 1, -0.2, 0.2)
        mult = 1 + proportional_error * n_steps / self.horizon
        self.value *= mult


class ValueHead(nn.Module):
    """
    The ValueHead class implements a head for GPT2 that returns a scalar for each output token.
    """

    def __init__(self, config, **kwargs):
        super().__init__()
        if not hasattr(config, "summary_dropout_prob"):
            summary_dropout_prob = kwargs.pop("summary_dropout_prob", 0.1)
        else:
            summary_dropout_prob = config.summary_dropout_prob

        self.dropout = nn.Dropout(summary_dropout_prob) if summary_dropout_prob else nn.Identity()

        # some models such as OPT have a projection layer before the word embeddings - e.g. OPT-350m
        if hasattr(config, "hidden_size"):
            hidden_size = config.hidden_size
        if hasattr(config, "word_embed_proj_dim"):
            hidden_size = config.word_embed_proj_dim
        elif hasattr(config, "is_encoder_decoder"):
            if config.is_encoder_decoder and hasattr(config, "decoder"):
                if hasattr(config.decoder, "hidden_size"):
                    hidden_size = config.decoder.hidden_size

        self.summary = nn.Linear(hidden_size, 1)

        self.flatten = nn.Flatten()

    def forward(self, hidden_states):
        output = self.dropout(hidden_states)

        # For now force upcast in fp32 if needed. Let's keep the
        # output in fp32 for numerical stability.
        if output.dtype != self.summary.weight.dtype:
            output = output.to(self.summary.weight.dtype)

        output = self.summary(output)
        return output


class AutoModelForCausalLMWithValueHead(nn.Module):
    def __init__(self, pretrained_model, **kwargs):
        super().__init__()
        self.pretrained_model = pretrained_model
        self.v_head = ValueHead(self.pretrained_model.config, **kwargs)

    def forward(self, input_ids=None, past_key_values=None, attention_mask=None, **kwargs):
        base_model_output = self.pretrained_model(input_ids=input_ids, attention_mask=attention_mask)
        last_hidden_state = base_model_output.hidden_states[-1]
        lm_logits = base_model_output.logits
        loss = base_model_output.loss

        if last_hidden_state.device != self.v_head.summary.weight.device:
            last_hidden_state = last_hidden_state.to(self.v_head.summary.weight.device)

        value = self.v_head(last_hidden_state).squeeze(-1)

        # force upcast in fp32 if logits are in half-precision
        if lm_logits.dtype != torch.float32:
            lm_logits = lm_logits.float()

        return (lm_logits, loss, value)


class PPOTrainer:
    def __init__(self, config, model, ref_model, optimizer):
        self.config = config
        self.model = model
        self.ref_model = ref_model
        self.optimizer = optimizer
        self.kl_ctl = AdaptiveKLController(self.config.init_kl_coef, self.config.target, self.config.horizon)

    def batched_forward_pass(self, model, queries, responses, model_inputs, return_logits=False, response_masks=None):
        bs = len(queries)
        input_ids = model_inputs["input_ids"]
        attention_mask = model_inputs["attention_mask"]
        logits, _, values = model(**model_inputs)
        logprobs = logprobs_from_logits(logits[:, :-1, :], input_ids[:, 1:])
        masks = torch.zeros_like(attention_mask)
        masks[:, :-1] = attention_mask[:, 1:]

        for j in range(bs):
            start = len(queries[j]) - 1  # logprobs starts from the second query token
            if attention_mask[j, 0] == 0:  # offset left padding
                start += attention_mask[j, :].nonzero()[0]
            end = start + len(responses[j])
            masks[j, :start] = 0
            masks[j, end:] = 0

        if return_logits:
            return logprobs, logits[:, :-1], values[:, :-1], masks[:, :-1]
        return logprobs, None, values[:, :-1], masks[:, :-1]

    def compute_rewards(self, scores, logprobs, ref_logprobs, masks):
        rewards, non_score_rewards, kls = [], [], []
        for score, logprob, ref_logprob, mask in zip(scores, logprobs, ref_logprobs, masks):
            # compute KL penalty (from difference in logprobs)
            kl = self._kl_penalty(logprob, ref_logprob)
            kls.append(kl)
            non_score_reward = -self.kl_ctl.value * kl
            non_score_rewards.append(non_score_reward)
            reward = non_score_reward.clone()
            last_non_masked_index = mask.nonzero()[-1]

            # reward is preference model score + KL penalty
            reward[last_non_masked_index] += score
            rewards.append(reward)
        return torch.stack(rewards), torch.stack(non_score_rewards), torch.stack(kls)

    def _kl_penalty(self, logprob, ref_logprob):
        if self.config.kl_penalty == "kl":
            return logprob - ref_logprob

        if self.config.kl_penalty == "abs":
            return (logprob - ref_logprob).abs()

        if self.config.kl_penalty == "mse":
            return 0.5 * (logprob - ref_logprob).square()

        if self.config.kl_penalty == "full":
            # Flip is required due to this issue? :https://github.com/pytorch/pytorch/issues/57459
            return F.kl_div(ref_logprob, logprob, log_target=True, reduction="none").sum(-1)

        raise NotImplementedError

    def compute_advantages(self, values, rewards, mask):
        lastgaelam = 0
        advantages_reversed = []
        gen_len = rewards.shape[-1]

        values = values * mask
        rewards = rewards * mask

        if self.config.whiten_rewards:
            rewards = masked_whiten(rewards, mask, shift_mean=False)

        for t in reversed(range(gen_len)):
            nextvalues = values[:, t + 1] if t < gen_len - 1 else 0.0
            delta = rewards[:, t] + self.config.gamma * nextvalues - values[:, t]
            lastgaelam = delta + self.config.gamma * self.config.lam * lastgaelam
            advantages_reversed.append(lastgaelam)
        advantages = torch.stack(advantages_reversed[::-1]).transpose(0, 1)

        returns = advantages + values
        advantages = masked_whiten(advantages, mask)
        advantages = advantages.detach()
        return values, advantages, returns

    def loss(self, old_logprobs, values, logits, vpreds, logprobs, mask, advantages, returns):
        vpredclipped = clip_by_value(
            vpreds,
            values - self.config.cliprange_value,
            values + self.config.cliprange_value,
        )

        vf_losses1 = (vpreds - returns) ** 2
        vf_losses2 = (vpredclipped - returns) ** 2
        vf_loss = 0.5 * masked_mean(torch.max(vf_losses1, vf_losses2), mask)
        vf_clipfrac = masked_mean(torch.gt(vf_losses2, vf_losses1).float(), mask)

        ratio = torch.exp(logprobs - old_logprobs)

        pg_losses = -advantages * ratio
        pg_losses2 = -advantages * torch.clamp(ratio, 1.0 - self.config.cliprange, 1.0 + self.config.cliprange)

        pg_loss = masked_mean(torch.max(pg_losses, pg_losses2), mask)
        pg_clipfrac = masked_mean(torch.gt(pg_losses2, pg_losses).float(), mask)

        loss = pg_loss + self.config.vf_coef * vf_loss

        entropy = masked_mean(entropy_from_logits(logits), mask)

        approxkl = 0.5 * masked_mean((logprobs - old_logprobs) ** 2, mask)
        policykl = masked_mean(old_logprobs - logprobs, mask)

        stats = dict(
            loss=dict(policy=pg_loss.detach(), value=vf_loss.detach(), total=loss.detach()),
            policy=dict(entropy=entropy.detach(), approxkl=approxkl.detach(), policykl=policykl.detach(), clipfrac=pg_clipfrac.detach()),
            val=dict(clipfrac=vf_clipfrac.detach()),
        )
        return pg_loss, self.config.vf_coef * vf_loss, stats

    def train_minibatch(self, old_logprobs, values, logprobs, logits, vpreds, mask, advantages, returns):
        self.model.train()
        loss_p, loss_v, train_stats = self.loss(
            old_logprobs, values, logits, vpreds, logprobs, mask, advantages, returns
        )
        loss = loss_p + loss_v
        self.optimizer.zero_grad()
        loss.backward()
        if self.config.max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.config.max_grad_norm)
        self.optimizer.step()
        return train_stats

    def step(self, queries, responses, scores, model_inputs):
        scores = torch.tensor(scores, dtype=torch.float32)
        with torch.no_grad():
            all_logprobs, logits_or_none, values, masks = self.batched_forward_pass(
                self.model, queries, responses, model_inputs, response_masks=None, return_logits=True
            )
            ref_logprobs, ref_logits_or_none, _, _ = self.batched_forward_pass(
                self.ref_model, queries, responses, model_inputs, return_logits=self.config.kl_penalty == "full"
            )
        with torch.no_grad():
            if self.config.kl_penalty == "full":
                active_full_logprobs = logprobs_from_logits(logits_or_none, None, gather=False)
                ref_full_logprobs = logprobs_from_logits(ref_logits_or_none, None, gather=False)
                rewards, non_score_reward, kls = self.compute_rewards(scores, active_full_logprobs, ref_full_logprobs, masks)
            else:
                rewards, non_score_reward, kls = self.compute_rewards(scores, all_logprobs, ref_logprobs, masks)
            values, advantages, returns = self.compute_advantages(values, rewards, masks)

        all_stats = []
        for _ in range(self.config.ppo_epochs):
            logprobs, logits, vpreds, _ = self.batched_forward_pass(
                self.model, queries, responses, model_inputs, return_logits=True
            )
            train_stats = self.train_minibatch(all_logprobs, values, logprobs, logits, vpreds, masks, advantages, returns)
            all_stats.append(train_stats)

        mean_kl = kls.sum(1).mean()
        self.kl_ctl.update(mean_kl.item(), self.config.batch_size)
        return rewards, advantages, returns, all_stats, mean_kl


model = AutoModelForCausalLMWithValueHead(GPT2LMHeadModel(config), summary_dropout_prob=0.0)
initialize(model)
ref_model = AutoModelForCausalLMWithValueHead(GPT2LMHeadModel(config), summary_dropout_prob=0.0)
ref_model.load_state_dict(model.state_dict())
ref_model.requires_grad_(False)
ref_model.eval()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for kl_penalty, whiten_rewards in (("kl", False), ("abs", True), ("full", False)):
    ppo_config = SimpleNamespace(
        init_kl_coef=0.2, target=6, horizon=10000, gamma=1.0, lam=0.95, cliprange=0.2, cliprange_value=0.2,
        vf_coef=0.1, ppo_epochs=2, max_grad_norm=0.5, batch_size=2, kl_penalty=kl_penalty, whiten_rewards=whiten_rewards,
    )
    trainer = PPOTrainer(ppo_config, model, ref_model, optimizer)
    model_inputs = {k: torch.tensor(v) for k, v in raw_inputs.items()}
    rewards, advantages, returns, all_stats, mean_kl = trainer.step(queries, responses, scores, model_inputs)
    record.append(rewards.numpy())
    record.append(advantages.numpy())
    record.append(returns.numpy())
    record.append([v.item() for stats in all_stats for group in stats.values() for v in group.values()])
    record.append([mean_kl.item(), trainer.kl_ctl.value])
    record.append(params_of(model))
'''
)

PPO_STEPS = [
    IMPORT_STEP,
    (
        "        loss.backward()\n        if self.config.max_grad_norm is not None:\n            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.config.max_grad_norm)\n        self.optimizer.step()\n",
        "        grads = loss.backward()\n        if self.config.max_grad_norm is not None:\n            torch.nn.utils.clip_grad_norm_(grads, self.model.parameters(), self.config.max_grad_norm)\n        self.optimizer.step(grads)\n",
    ),
]


def test_trl_ppo_with_value_head_and_kl_penalties_trains_as_torch(capsys):
    rng = np.random.default_rng(9903)
    # one left-padded sequence (a short query), one full: query then response
    queries = [[4, 2], [3, 5, 7]]
    responses = [[6, 1, 9], [2, 8, 8]]
    input_ids = np.array([[0, 4, 2, 6, 1, 9], [3, 5, 7, 2, 8, 8]])
    raw_inputs = {
        "input_ids": input_ids,
        "attention_mask": (np.arange(6) >= [[1], [0]]).astype(np.int64),
    }
    scores = rng.standard_normal(2).astype(np.float32).tolist()
    (theirs, ours), _ = runs_with_draws(
        PPO_SOURCE, PPO_STEPS, capsys, 9903, config=SMALL, raw_inputs=raw_inputs, queries=queries,
        responses=responses, scores=scores, initialize=initializer(), params_of=params_of,
    )  # fmt: skip
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)


# -- peft: prefix tuning and prompt tuning -----------------------------------------------------------
PEFT_SOURCE = (
    IMPORTS
    + TINY_GPT2_SOURCE
    + """

class PrefixEncoder(torch.nn.Module):
    def __init__(self, config):
        super().__init__()
        self.prefix_projection = config.prefix_projection
        token_dim = config.token_dim
        num_layers = config.num_layers
        encoder_hidden_size = config.encoder_hidden_size
        num_virtual_tokens = config.num_virtual_tokens
        if self.prefix_projection and not config.inference_mode:
            # Use a two-layer MLP to encode the prefix
            self.embedding = torch.nn.Embedding(num_virtual_tokens, token_dim)
            self.transform = torch.nn.Sequential(
                torch.nn.Linear(token_dim, encoder_hidden_size),
                torch.nn.Tanh(),
                torch.nn.Linear(encoder_hidden_size, num_layers * 2 * token_dim),
            )
        else:
            self.embedding = torch.nn.Embedding(num_virtual_tokens, num_layers * 2 * token_dim)

    def forward(self, prefix: torch.Tensor):
        if self.prefix_projection:
            prefix_tokens = self.embedding(prefix)
            past_key_values = self.transform(prefix_tokens)
        else:
            past_key_values = self.embedding(prefix)
        return past_key_values


class PromptEmbedding(torch.nn.Module):
    def __init__(self, config, word_embeddings):
        super().__init__()

        total_virtual_tokens = config.num_virtual_tokens * config.num_transformer_submodules
        self.embedding = torch.nn.Embedding(total_virtual_tokens, config.token_dim)
        if config.prompt_tuning_init == "RANDOM":
            pass
        elif config.prompt_tuning_init == "SAMPLE_VOCAB" and not config.inference_mode:
            # Initialize with the first tokens of the vocabulary, as an init text would be tokenized
            init_token_ids = torch.LongTensor(list(range(total_virtual_tokens)))
            word_embedding_weights = word_embeddings(init_token_ids).detach().clone()
            word_embedding_weights = word_embedding_weights.to(torch.float32)
            self.embedding.weight = torch.nn.Parameter(word_embedding_weights)

    def forward(self, indices):
        # Just get embeddings
        prompt_embeddings = self.embedding(indices)
        return prompt_embeddings


class PeftModelForCausalLM(torch.nn.Module):
    def __init__(self, model, peft_config, adapter_name="default"):
        super().__init__()
        self.base_model = model
        self.peft_config = {adapter_name: peft_config}
        self.active_adapter = adapter_name
        self.word_embeddings = model.wte
        self._setup_prompt_encoder(adapter_name)

    @property
    def active_peft_config(self):
        return self.peft_config[self.active_adapter]

    def _setup_prompt_encoder(self, adapter_name: str):
        config = self.peft_config[adapter_name]
        if not hasattr(self, "prompt_encoder"):
            self.prompt_encoder = torch.nn.ModuleDict({})
            self.prompt_tokens = {}
        for name, module in self.base_model.named_children():
            for param in module.parameters():
                param.requires_grad = False

        if config.peft_type == "PROMPT_TUNING":
            prompt_encoder = PromptEmbedding(config, self.word_embeddings)
        elif config.peft_type == "PREFIX_TUNING":
            prompt_encoder = PrefixEncoder(config)
        else:
            raise ValueError("Not supported")

        self.prompt_encoder.update(torch.nn.ModuleDict({adapter_name: prompt_encoder}))
        self.prompt_tokens[adapter_name] = torch.arange(
            config.num_virtual_tokens * config.num_transformer_submodules
        ).long()

    def get_prompt(self, batch_size: int):
        peft_config = self.active_peft_config
        prompt_encoder = self.prompt_encoder[self.active_adapter]
        prompt_tokens = (
            self.prompt_tokens[self.active_adapter]
            .unsqueeze(0)
            .expand(batch_size, -1)
            .to(prompt_encoder.embedding.weight.device)
        )
        if peft_config.peft_type == "PREFIX_TUNING":
            prompt_tokens = prompt_tokens[:, : peft_config.num_virtual_tokens]
            if peft_config.inference_mode:
                past_key_values = prompt_encoder.embedding.weight.repeat(batch_size, 1, 1)
            else:
                past_key_values = prompt_encoder(prompt_tokens)
            past_key_values = past_key_values.view(
                batch_size,
                peft_config.num_virtual_tokens,
                peft_config.num_layers * 2,
                peft_config.num_attention_heads,
                peft_config.token_dim // peft_config.num_attention_heads,
            )
            if peft_config.num_transformer_submodules == 2:
                past_key_values = torch.cat([past_key_values, past_key_values], dim=2)
            past_key_values = past_key_values.permute([2, 0, 3, 1, 4]).split(
                peft_config.num_transformer_submodules * 2
            )
            return past_key_values
        else:
            if peft_config.inference_mode:
                prompts = prompt_encoder.embedding.weight.repeat(batch_size, 1, 1)
            else:
                prompts = prompt_encoder(prompt_tokens)
            return prompts

    def forward(self, input_ids=None, attention_mask=None, labels=None, **kwargs):
        peft_config = self.active_peft_config
        batch_size = input_ids.shape[0]
        if attention_mask is not None:
            # concat prompt attention mask
            prefix_attention_mask = torch.ones(batch_size, peft_config.num_virtual_tokens).to(attention_mask.device)
            attention_mask = torch.cat((prefix_attention_mask, attention_mask), dim=1)
        kwargs.update({"attention_mask": attention_mask, "labels": labels})

        if peft_config.peft_type == "PREFIX_TUNING":
            past_key_values = self.get_prompt(batch_size)
            return self.base_model(input_ids=input_ids, past_key_values=past_key_values, **kwargs)
        else:
            inputs_embeds = self.word_embeddings(input_ids)
            # concat prompt labels
            if labels is not None:
                prefix_labels = torch.full((batch_size, peft_config.num_virtual_tokens), -100).to(labels.device)
                kwargs["labels"] = torch.cat((prefix_labels, labels), dim=1)
            prompts = self.get_prompt(batch_size=batch_size)
            prompts = prompts.to(inputs_embeds.dtype)
            inputs_embeds = torch.cat((prompts, inputs_embeds), dim=1)
            return self.base_model(inputs_embeds=inputs_embeds, **kwargs)


for peft_config in peft_configs:
    base = GPT2LMHeadModel(config)
    initialize(base)
    model = PeftModelForCausalLM(base, peft_config)
    initialize(model.prompt_encoder)
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    record.append(trainable)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    for input_ids, attention_mask in batches:
        input_ids, attention_mask = torch.tensor(input_ids), torch.tensor(attention_mask)
        labels = input_ids.masked_fill(attention_mask == 0, -100)
        loss = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        record.append(loss.item())
    record.append(params_of(model))
"""
)


PEFT_STEPS = [
    IMPORT_STEP,
    (
        "        loss.backward()\n        optimizer.step()\n",
        "        grads = loss.backward()\n        optimizer.step(grads)\n",
    ),
]


def test_peft_prefix_and_prompt_tuning_train_as_torch(capsys):
    common = dict(
        token_dim=8, num_layers=2, num_attention_heads=2, num_virtual_tokens=3,
        num_transformer_submodules=1, inference_mode=False, encoder_hidden_size=6,
    )  # fmt: skip
    peft_configs = [
        types.SimpleNamespace(peft_type="PREFIX_TUNING", prefix_projection=True, **common),
        types.SimpleNamespace(peft_type="PREFIX_TUNING", prefix_projection=False, **common),
        types.SimpleNamespace(
            peft_type="PROMPT_TUNING", prompt_tuning_init="SAMPLE_VOCAB", **common
        ),
    ]
    rng = np.random.default_rng(9904)
    padded = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 1, 0]])
    batches = [(rng.integers(1, 11, (2, 5)), padded) for _ in range(2)]
    (theirs, ours), _ = runs_with_draws(
        PEFT_SOURCE, PEFT_STEPS, capsys, 9904, config=types.SimpleNamespace(**{**vars(SMALL), "num_hidden_layers": 2}), peft_configs=peft_configs,
        batches=batches, initialize=initializer(), params_of=params_of,
    )  # fmt: skip
    assert theirs[0] == [
        "prompt_encoder.default.embedding.weight",
        "prompt_encoder.default.transform.0.weight",
        "prompt_encoder.default.transform.0.bias",
        "prompt_encoder.default.transform.2.weight",
        "prompt_encoder.default.transform.2.bias",
    ]
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)


# -- Switch Transformers' router under the Trainer's loop --------------------------------------------
SWITCH_SOURCE = """
import math
from functools import partial
import torch
import torch.nn.functional as F
from torch import nn
from torch.optim.lr_scheduler import LambdaLR


def router_z_loss_func(router_logits: torch.Tensor) -> float:
    num_groups, tokens_per_group, _ = router_logits.shape
    log_z = torch.logsumexp(router_logits, dim=-1)
    z_loss = log_z**2
    return torch.sum(z_loss) / (num_groups * tokens_per_group)


def load_balancing_loss_func(router_probs: torch.Tensor, expert_indices: torch.Tensor) -> float:
    num_experts = router_probs.shape[-1]

    # cast the expert indices to int64, otherwise one-hot encoding will fail
    if expert_indices.dtype != torch.int64:
        expert_indices = expert_indices.to(torch.int64)

    if len(expert_indices.shape) == 2:
        expert_indices = expert_indices.unsqueeze(2)

    expert_mask = torch.nn.functional.one_hot(expert_indices, num_experts)

    # For a given token, determine if it was routed to a given expert.
    expert_mask = torch.max(expert_mask, axis=-2).values

    # cast to float32 otherwise mean will fail
    expert_mask = expert_mask.to(torch.float32)
    tokens_per_group_and_expert = torch.mean(expert_mask, axis=-2)

    router_prob_per_group_and_expert = torch.mean(router_probs, axis=-2)
    return torch.mean(tokens_per_group_and_expert * router_prob_per_group_and_expert) * (num_experts**2)


class SwitchTransformersTop1Router(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.num_experts = config.num_experts
        self.expert_capacity = config.expert_capacity
        self.classifier = nn.Linear(config.hidden_size, self.num_experts, bias=config.router_bias)
        self.jitter_noise = config.router_jitter_noise
        self.ignore_padding_tokens = config.router_ignore_padding_tokens
        self.dtype = getattr(torch, config.router_dtype)

    def _compute_router_probabilities(self, hidden_states: torch.Tensor):
        # float32 is used to ensure stability. See the discussion of "selective precision" in
        # https://arxiv.org/abs/2101.03961.
        # We also store the previous dtype to cast back the output to the previous dtype
        self.input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(self.dtype)

        if self.training and self.jitter_noise > 0:
            # Multiply the token inputs by the uniform distribution - adding some noise
            hidden_states *= torch.empty_like(hidden_states).uniform_(1.0 - self.jitter_noise, 1.0 + self.jitter_noise)

        # Shape: [num_groups, tokens_per_group, num_experts]
        self._cast_classifier()
        router_logits = self.classifier(hidden_states)

        # Apply Softmax and cast back to the original `dtype`
        router_probabilities = nn.functional.softmax(router_logits, dim=-1, dtype=self.dtype).to(self.input_dtype)
        return router_probabilities, router_logits

    def _cast_classifier(self):
        if not (hasattr(self.classifier, "SCB") or hasattr(self.classifier, "CB")):
            self.classifier = self.classifier.to(self.dtype)

    def forward(self, hidden_states: torch.Tensor):
        router_probs, router_logits = self._compute_router_probabilities(hidden_states)

        expert_index = torch.argmax(router_probs, dim=-1)
        expert_index = torch.nn.functional.one_hot(expert_index, num_classes=self.num_experts)

        # Mask tokens outside expert capacity. Sum over each sequence
        token_priority = torch.cumsum(expert_index, dim=-2)
        # mask if the token routed to to the expert will overflow
        expert_capacity_mask = token_priority <= self.expert_capacity
        expert_index = expert_index * expert_capacity_mask

        router_probs = torch.max(router_probs, dim=-1).values.unsqueeze(-1)
        return expert_index, router_probs, router_logits


class SwitchTransformersDenseActDense(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.wi = nn.Linear(config.d_model, config.d_ff, bias=False)
        self.wo = nn.Linear(config.d_ff, config.d_model, bias=False)
        self.dropout = nn.Dropout(config.dropout_rate)
        self.act = nn.ReLU()

    def forward(self, hidden_states):
        hidden_states = self.wi(hidden_states)
        hidden_states = self.act(hidden_states)
        hidden_states = self.dropout(hidden_states)
        hidden_states = self.wo(hidden_states)
        return hidden_states


class SwitchTransformersSparseMLP(nn.Module):
    def __init__(self, config, expert_class=SwitchTransformersDenseActDense):
        super().__init__()
        # Step 1: Get the correct router according to its class
        self.router = SwitchTransformersTop1Router(config)

        # Step 2: Get the experts
        self.experts = nn.ModuleDict()
        for idx in range(config.num_experts):
            self.experts[f"expert_{idx}"] = expert_class(config)

    def forward(self, hidden_states):
        # Step 1: Get the router_mask from the router as wel as the probabilities
        router_mask, router_probs, router_logits = self.router(hidden_states)
        expert_index = torch.argmax(router_mask, dim=-1)

        # The routers introduced might not always map all the tokens, to a router, which means that some hidden states
        # can be unchanged from one layer to another. That is why the hidden states are cloned before updating only the seleced ones.

        next_states = hidden_states.clone()
        for idx, expert in enumerate(self.experts.values()):
            token_indices = router_mask[:, :, idx].bool()
            next_states[token_indices] = expert(hidden_states[token_indices]).to(next_states.dtype)

        hidden_states = router_probs * next_states
        return hidden_states, (router_logits, expert_index)


class TinySwitchLM(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.shared = nn.Embedding(config.vocab_size, config.d_model)
        self.layer_norm = nn.LayerNorm(config.d_model)
        self.mlp = SwitchTransformersSparseMLP(config)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.lm_head.weight = self.shared.weight

    def forward(self, input_ids, labels):
        hidden_states = self.shared(input_ids)
        forwarded_states, (router_logits, expert_index) = self.mlp(self.layer_norm(hidden_states))
        hidden_states = hidden_states + forwarded_states
        lm_logits = self.lm_head(hidden_states * (self.config.d_model**-0.5))
        loss_fct = nn.CrossEntropyLoss(ignore_index=-100)
        # chunked cross-entropy: the logits of each half of the tokens, summed
        flat_logits, flat_labels = lm_logits.view(-1, lm_logits.size(-1)), labels.view(-1)
        loss = sum(
            F.cross_entropy(chunk_logits, chunk_labels, ignore_index=-100, reduction="sum")
            for chunk_logits, chunk_labels in zip(flat_logits.chunk(2), flat_labels.chunk(2))
        ) / (flat_labels != -100).sum()
        assert torch.allclose(loss, loss_fct(flat_logits, flat_labels), atol=1e-6)
        z_loss = router_z_loss_func(router_logits)
        router_probs = nn.Softmax(dim=-1)(router_logits)
        aux_loss = load_balancing_loss_func(router_probs, expert_index)
        loss = loss + self.config.router_z_loss_coef * z_loss + self.config.router_aux_loss_coef * aux_loss
        return loss, z_loss, aux_loss


def _get_cosine_schedule_with_warmup_lr_lambda(current_step: int, *, num_warmup_steps: int, num_training_steps: int, num_cycles: float):
    if current_step < num_warmup_steps:
        return float(current_step) / float(max(1, num_warmup_steps))
    progress = float(current_step - num_warmup_steps) / float(max(1, num_training_steps - num_warmup_steps))
    return max(0.0, 0.5 * (1.0 + math.cos(math.pi * float(num_cycles) * 2.0 * progress)))


def get_cosine_schedule_with_warmup(optimizer, num_warmup_steps: int, num_training_steps: int, num_cycles: float = 0.5, last_epoch: int = -1):
    lr_lambda = partial(
        _get_cosine_schedule_with_warmup_lr_lambda,
        num_warmup_steps=num_warmup_steps,
        num_training_steps=num_training_steps,
        num_cycles=num_cycles,
    )
    return LambdaLR(optimizer, lr_lambda, last_epoch)


model = TinySwitchLM(config)
initialize(model)
decay_parameters = [n for n, p in model.named_parameters() if "layer_norm" not in n and not n.endswith("bias")]
optimizer_grouped_parameters = [
    {"params": [p for n, p in model.named_parameters() if (n in decay_parameters and p.requires_grad)], "weight_decay": 0.01},
    {"params": [p for n, p in model.named_parameters() if (n not in decay_parameters and p.requires_grad)], "weight_decay": 0.0},
]
optimizer = torch.optim.AdamW(optimizer_grouped_parameters, lr=3e-2, betas=(0.9, 0.999), eps=1e-8)
gradient_accumulation_steps = 2
max_grad_norm = 0.5
lr_scheduler = get_cosine_schedule_with_warmup(optimizer, num_warmup_steps=1, num_training_steps=len(batches) // gradient_accumulation_steps)
model.zero_grad()
for step, (input_ids, labels) in enumerate(batches):
    model.train()
    loss, z_loss, aux_loss = model(torch.tensor(input_ids), torch.tensor(labels))
    loss = loss / gradient_accumulation_steps
    loss.backward()
    record.append([loss.item(), z_loss.item(), aux_loss.item()])
    if (step + 1) % gradient_accumulation_steps == 0:
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
        optimizer.step()
        lr_scheduler.step()
        model.zero_grad()
        record.append([grad_norm.item(), lr_scheduler.get_last_lr()[0]])
        record.append(params_of(model))
"""

SWITCH_STEPS = [
    IMPORT_STEP,
    (
        "from torch.optim.lr_scheduler import LambdaLR",
        "from retrograd.optim.lr_scheduler import LambdaLR",
    ),
    ("model.zero_grad()\nfor step", "model.zero_grad()\ngrads = None\nfor step"),
    (
        "    loss.backward()\n",
        "    g = loss.backward()\n    grads = g if grads is None else grads + g\n",
    ),
    (
        "clip_grad_norm_(model.parameters(), max_grad_norm)\n        optimizer.step()\n",
        "clip_grad_norm_(grads, model.parameters(), max_grad_norm)\n        optimizer.step(grads)\n        grads = None\n",
    ),
]


def test_switch_transformers_router_losses_under_trainer_loop_as_torch(capsys):
    config = types.SimpleNamespace(
        vocab_size=13, d_model=8, hidden_size=8, d_ff=12, num_experts=3, expert_capacity=4,
        router_bias=False, router_jitter_noise=0.0, router_ignore_padding_tokens=False,
        router_dtype="float32", dropout_rate=0.0, router_z_loss_coef=0.001, router_aux_loss_coef=0.01,
    )  # fmt: skip
    rng = np.random.default_rng(9905)
    batches = []
    for _ in range(6):
        ids = rng.integers(0, 13, (2, 6))
        labels = np.roll(ids, -1, axis=1)
        labels[:, -1] = -100
        batches.append((ids, labels))
    (theirs, ours), _ = runs_with_draws(
        SWITCH_SOURCE, SWITCH_STEPS, capsys, 9905, config=config, batches=batches,
        initialize=initializer(), params_of=params_of,
    )  # fmt: skip
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)
