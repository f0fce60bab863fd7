# ruff: noqa: E501  (the programs are kept as their authors wrote them: long lines)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
reference-free preference optimisation as huggingface/trl 0.9 writes it: ORPO
(``trainer/orpo_trainer.py``'s ``odds_ratio_loss`` with ``torch.log1p(-torch.exp(logps))``,
the NLL of the chosen responses through ``nn.CrossEntropyLoss``'s ``-100`` labels) and CPO
with its ``sigmoid``, ``hinge``, ``ipo`` and ``simpo`` losses (``trainer/cpo_trainer.py``'s
``cpo_loss``, ``cpo_alpha`` times the NLL), each trained a few steps over a tiny causal LM whose
input embeddings are frozen and whose blocks run under the reentrant
``torch.utils.checkpoint.checkpoint`` (transformers' default), made trainable through
``enable_input_require_grads``' forward hook (``output.requires_grad_(True)``), against torch's
run of the same code from the same weights.

Also exercised: ``concatenated_inputs``' ``pad_to_length`` (``pad_value * torch.ones(*pad_size,
dtype=...)``), ``get_batch_logps``' ``labels[labels == label_pad_token_id] = 0`` with
``average_log_prob``, the metrics (``.detach().mean().cpu()``, ``(chosen_rewards >
rejected_rewards).float()``).

The lines changed: the ``import`` lines and the gradient lines (``grads = loss.backward()``
given to ``optimizer.step``).
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


PREFERENCE_SOURCE = '''
from collections import defaultdict
from typing import Dict, List, Union

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint


class Block(nn.Module):
    def __init__(self, dim, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.ln_1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.proj = nn.Linear(dim, dim)
        self.ln_2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.SiLU(), nn.Linear(4 * dim, dim))

    def forward(self, x, attention_bias):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln_1(x)).view(B, T, 3, self.n_heads, C // self.n_heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=attention_bias)
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.mlp(self.ln_2(x))


class TinyCausalLM(nn.Module):
    def __init__(self, vocab_size, dim, n_heads, n_layers, n_positions):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab_size, dim)
        self.embed_positions = nn.Parameter(torch.zeros(n_positions, dim))
        self.layers = nn.ModuleList([Block(dim, n_heads) for _ in range(n_layers)])
        self.norm = nn.LayerNorm(dim)
        self.lm_head = nn.Linear(dim, vocab_size, bias=False)
        self.gradient_checkpointing = False

    def get_input_embeddings(self):
        return self.embed_tokens

    def enable_input_require_grads(self):
        """
        Enables the gradients for the input embeddings. This is useful for fine-tuning adapter weights while keeping
        the model weights fixed.
        """

        def make_inputs_require_grads(module, input, output):
            output.requires_grad_(True)

        self._require_grads_hook = self.get_input_embeddings().register_forward_hook(make_inputs_require_grads)

    def forward(self, input_ids, attention_mask=None, use_cache=False):
        B, T = input_ids.shape
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        allowed = causal[None, None] & attention_mask[:, None, None, :].bool()
        attention_bias = torch.zeros(B, 1, T, T).masked_fill(~allowed, torch.finfo(torch.float32).min)
        hidden_states = self.embed_tokens(input_ids) + self.embed_positions[:T]
        for layer in self.layers:
            if self.gradient_checkpointing and self.training:
                hidden_states = torch.utils.checkpoint.checkpoint(layer, hidden_states, attention_bias, use_reentrant=True)
            else:
                hidden_states = layer(hidden_states, attention_bias)
        return self.lm_head(self.norm(hidden_states))


def pad_to_length(tensor: torch.Tensor, length: int, pad_value: Union[int, float], dim: int = -1) -> torch.Tensor:
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


class PreferenceTrainer:
    """the parts of ORPOTrainer and CPOTrainer that train"""

    def __init__(self, model, args, kind):
        self.model = model
        self.kind = kind
        self.beta = args.beta
        self.loss_type = args.loss_type
        self.label_smoothing = args.label_smoothing
        self.simpo_gamma = args.simpo_gamma
        self.cpo_alpha = args.cpo_alpha
        self.label_pad_token_id = -100
        self.padding_value = 0
        self.is_encoder_decoder = False
        self.optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=args.learning_rate)
        self._stored_metrics = defaultdict(lambda: defaultdict(list))

    @staticmethod
    def concatenated_inputs(
        batch: Dict[str, Union[List, torch.LongTensor]],
        is_encoder_decoder: bool = False,
        label_pad_token_id: int = -100,
        padding_value: int = 0,
        device=None,
    ) -> Dict[str, torch.LongTensor]:
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

    def odds_ratio_loss(self, policy_chosen_logps, policy_rejected_logps):
        # Derived from Eqs. (4) and (7) from https://huggingface.co/papers/2403.07691 by using log identities and exp(log(P(y|x)) = P(y|x)
        log_odds = (policy_chosen_logps - policy_rejected_logps) - (
            torch.log1p(-torch.exp(policy_chosen_logps)) - torch.log1p(-torch.exp(policy_rejected_logps))
        )
        sig_ratio = F.sigmoid(log_odds)
        ratio = torch.log(sig_ratio)
        losses = self.beta * ratio

        chosen_rewards = self.beta * (policy_chosen_logps).detach()
        rejected_rewards = self.beta * (policy_rejected_logps).detach()

        return losses, chosen_rewards, rejected_rewards, torch.mean(ratio), torch.mean(log_odds)

    def cpo_loss(self, policy_chosen_logps, policy_rejected_logps):
        logits = (policy_chosen_logps - policy_rejected_logps)

        # The beta is a temperature parameter for the CPO loss, typically something in the range of 0.1 to 0.5.
        # We ignore the reference model as beta -> 0. The label_smoothing parameter encodes our uncertainty about the labels and
        # calculates a conservative CPO loss.

        if self.loss_type == "simpo":
            gamma_logratios = self.simpo_gamma / self.beta
            logits = logits - gamma_logratios
            # This reduces to Equation 3 from the CPO paper when label_smoothing -> 0.
            losses = (
                -F.logsigmoid(self.beta * logits) * (1 - self.label_smoothing)
                - F.logsigmoid(-self.beta * logits) * self.label_smoothing
            )
        elif self.loss_type == "sigmoid":
            # This reduces to Equation 3 from the CPO paper when label_smoothing -> 0.
            losses = (
                -F.logsigmoid(self.beta * logits) * (1 - self.label_smoothing)
                - F.logsigmoid(-self.beta * logits) * self.label_smoothing
            )
        elif self.loss_type == "hinge":
            losses = torch.relu(1 - self.beta * logits)
        elif self.loss_type == "ipo":
            # eqn (17) of the paper where beta is the regularization parameter for the IPO loss, denoted by tau in the paper.
            losses = (logits - 1 / (2 * self.beta)) ** 2
        else:
            raise ValueError(
                f"Unknown loss type: {self.loss_type}. Should be one of ['sigmoid', 'hinge', 'ipo', 'simpo']"
            )

        chosen_rewards = self.beta * (policy_chosen_logps).detach()
        rejected_rewards = self.beta * (policy_rejected_logps).detach()

        return losses, chosen_rewards, rejected_rewards

    @staticmethod
    def get_batch_logps(
        logits: torch.FloatTensor,
        labels: torch.LongTensor,
        average_log_prob: bool = False,
        label_pad_token_id: int = -100,
        is_encoder_decoder: bool = False,
    ) -> torch.FloatTensor:
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

        outputs = model(
            concatenated_batch["concatenated_input_ids"],
            attention_mask=concatenated_batch["concatenated_attention_mask"],
            use_cache=False,
        )
        all_logits = outputs

        def cross_entropy_loss(logits, labels):
            if not self.is_encoder_decoder:
                # Shift so that tokens < n predict n
                logits = logits[..., :-1, :].contiguous()
                labels = labels[..., 1:].contiguous()
            # Flatten the tokens
            loss_fct = nn.CrossEntropyLoss()
            logits = logits.view(-1, logits.shape[-1])
            labels = labels.view(-1)
            # Enable model parallelism
            labels = labels.to(logits.device)
            loss = loss_fct(logits, labels)
            return loss

        labels = concatenated_batch["concatenated_labels"].clone()
        if self.kind == "cpo" and self.cpo_alpha == 0:
            policy_nll_loss = torch.tensor(0.0)
        else:
            policy_nll_loss = cross_entropy_loss(all_logits[:len_chosen], labels[:len_chosen])

        all_logps = self.get_batch_logps(
            all_logits,
            concatenated_batch["concatenated_labels"],
            average_log_prob=self.kind == "orpo" or self.loss_type in ["ipo", "simpo"],
            is_encoder_decoder=self.is_encoder_decoder,
            label_pad_token_id=self.label_pad_token_id,
        )

        chosen_logps = all_logps[:len_chosen]
        rejected_logps = all_logps[len_chosen:]

        chosen_logits = all_logits[:len_chosen]
        rejected_logits = all_logits[len_chosen:]

        return (chosen_logps, rejected_logps, chosen_logits, rejected_logits, policy_nll_loss)

    def get_batch_loss_metrics(self, model, batch, train_eval="train"):
        metrics = {}

        (
            policy_chosen_logps,
            policy_rejected_logps,
            policy_chosen_logits,
            policy_rejected_logits,
            policy_nll_loss,
        ) = self.concatenated_forward(model, batch)

        prefix = "eval_" if train_eval == "eval" else ""
        if self.kind == "orpo":
            losses, chosen_rewards, rejected_rewards, log_odds_ratio, log_odds_chosen = self.odds_ratio_loss(
                policy_chosen_logps, policy_rejected_logps
            )
            # full ORPO loss
            loss = policy_nll_loss - losses.mean()
            metrics[f"{prefix}log_odds_ratio"] = log_odds_ratio
            metrics[f"{prefix}log_odds_chosen"] = log_odds_chosen
        else:
            losses, chosen_rewards, rejected_rewards = self.cpo_loss(policy_chosen_logps, policy_rejected_logps)
            loss = losses.mean() + self.cpo_alpha * policy_nll_loss

        reward_accuracies = (chosen_rewards > rejected_rewards).float()

        metrics[f"{prefix}rewards/chosen"] = chosen_rewards.mean().cpu()
        metrics[f"{prefix}rewards/rejected"] = rejected_rewards.mean().cpu()
        metrics[f"{prefix}rewards/accuracies"] = reward_accuracies.mean().cpu()
        metrics[f"{prefix}rewards/margins"] = (chosen_rewards - rejected_rewards).mean().cpu()
        metrics[f"{prefix}logps/rejected"] = policy_rejected_logps.detach().mean().cpu()
        metrics[f"{prefix}logps/chosen"] = policy_chosen_logps.detach().mean().cpu()
        metrics[f"{prefix}logits/rejected"] = policy_rejected_logits.detach().mean().cpu()
        metrics[f"{prefix}logits/chosen"] = policy_chosen_logits.detach().mean().cpu()
        metrics[f"{prefix}nll_loss"] = policy_nll_loss.detach().mean().cpu()

        return loss, metrics

    def training_step(self, batch):
        self.model.train()
        loss, metrics = self.get_batch_loss_metrics(self.model, batch)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        for key, value in metrics.items():
            self._stored_metrics["train"][key].append(value.item())
        return loss.detach()
'''

TRAIN_SOURCE = """
from types import SimpleNamespace

model = TinyCausalLM(vocab_size=12, dim=16, n_heads=2, n_layers=2, n_positions=16)
nn.init.normal_(model.embed_positions, std=0.1)
initialize(model)
model.get_input_embeddings().requires_grad_(False)
model.enable_input_require_grads()
model.gradient_checkpointing = True
args = SimpleNamespace(beta=beta, loss_type=loss_type, label_smoothing=label_smoothing, simpo_gamma=0.5,
                       cpo_alpha=cpo_alpha, learning_rate=2e-2)
trainer = PreferenceTrainer(model, args, kind)
record.append([n for n, p in model.named_parameters() if p.requires_grad])
for raw in batches:
    batch = {k: torch.tensor(v) for k, v in raw.items()}
    loss = trainer.training_step(batch)
    record.append(loss.item())
    record.append(params_of(model))
record.append({k: np.array(v) for k, v in trainer._stored_metrics["train"].items()})
"""

STEPS = [
    ("\nimport torch\nimport torch.nn as nn\nimport torch.nn.functional as F\nimport torch.utils.checkpoint\n",
     "\nimport retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.nn.functional as F\nimport retrograd.utils.checkpoint\n"),
    ("        loss.backward()\n        self.optimizer.step()\n",
     "        grads = loss.backward()\n        self.optimizer.step(grads)\n"),
]  # fmt: skip


def preference_batches(rng, steps=3):
    """prompt + response rows as trl's tokenize_row leaves them: the prompt's labels -100,
    right padding (0 / mask 0 / label -100), the rejected side shorter than the chosen"""
    batches = []
    for _ in range(steps):
        raw = {}
        for side, width in (("chosen", 8), ("rejected", 6)):
            ids = rng.integers(1, 12, (2, width))
            mask = np.ones_like(ids)
            labels = ids.copy()
            labels[:, :3] = -100  # the prompt
            ids[1, -1:] = 0
            mask[1, -1:] = 0
            labels[1, -1:] = -100
            raw.update({f"{side}_input_ids": ids.tolist(), f"{side}_attention_mask": mask.tolist(),
                        f"{side}_labels": labels.tolist()})  # fmt: skip
        batches.append(raw)
    return batches


@pytest.mark.parametrize(
    ("kind", "loss_type", "beta", "label_smoothing", "cpo_alpha"),
    [
        ("orpo", None, 0.1, 0.0, None),
        ("cpo", "sigmoid", 0.1, 0.1, 1.0),
        ("cpo", "hinge", 0.5, 0.0, 0.5),
        ("cpo", "ipo", 0.1, 0.0, 1.0),
        ("cpo", "simpo", 2.0, 0.0, 0.0),
    ],
)
def test_trl_orpo_and_cpo_simpo_losses_train_through_reentrant_checkpoints_as_torch(
    capsys, kind, loss_type, beta, label_smoothing, cpo_alpha
):
    batches = preference_batches(np.random.default_rng(24501))
    (theirs, ours), _ = runs_with_draws(
        PREFERENCE_SOURCE + TRAIN_SOURCE, STEPS, capsys, 24501, batches=batches, kind=kind,
        loss_type=loss_type, beta=beta, label_smoothing=label_smoothing, cpo_alpha=cpo_alpha,
        initialize=initializer(), params_of=params_of,
    )  # fmt: skip
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)
