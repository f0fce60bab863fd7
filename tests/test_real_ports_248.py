# ruff: noqa: E501  (the programs are kept as their authors wrote them: long lines)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
Medusa heads as FasterDecoding/Medusa writes them (``medusa/model/medusa_model_legacy.py``'s
``ResBlock`` and ``MedusaModel``, ``medusa/train/train_legacy.py``'s ``CustomizedTrainer
.compute_loss``), trained a few steps on a frozen base model against torch's run of the same
code from the same weights, then asked for their top-k candidates.

What it exercises: the base model run under ``torch.inference_mode()`` and its hidden states
``clone()``-d outside it to train the heads on; ``nn.Sequential(*([ResBlock(hidden_size)] *
medusa_num_layers), ...)`` holding one block several times (its parameters counted once);
``torch.nn.init.zeros_`` of the identity-initialised blocks; ``torch.stack`` of the heads'
logits; head ``i``'s shifted loss ``logits[i, :, : -(2 + i)]`` against ``labels[..., 2 + i :]``
with ``IGNORE_TOKEN_ID``, and its top-k accuracy (``topk[not_ignore]``, ``topk.eq(...)
.any(-1)``).

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


MEDUSA_SOURCE = '''
import torch
import torch.nn as nn
from torch.nn import CrossEntropyLoss

IGNORE_TOKEN_ID = -100


class ResBlock(nn.Module):
    """
    A Residual Block module.

    This module performs a linear transformation followed by a SiLU activation,
    and then adds the result to the original input, creating a residual connection.

    Args:
        hidden_size (int): The size of the hidden layers in the block.
    """

    def __init__(self, hidden_size):
        super().__init__()
        self.linear = nn.Linear(hidden_size, hidden_size)
        # Initialize as an identity mapping
        torch.nn.init.zeros_(self.linear.weight)
        # Use SiLU activation to keep consistent with the Llama model
        self.act = nn.SiLU()

    def forward(self, x):
        """
        Forward pass of the ResBlock.

        Args:
            x (torch.Tensor): Input tensor.

        Returns:
            torch.Tensor: Output after the residual connection and activation.
        """
        return x + self.act(self.linear(x))


class TinyBaseLM(nn.Module):
    """a causal LM laid out as transformers' (``.model`` returns a tuple, ``.lm_head``)"""

    class Backbone(nn.Module):
        def __init__(self, vocab_size, hidden_size):
            super().__init__()
            self.embed_tokens = nn.Embedding(vocab_size, hidden_size)
            self.layer = nn.TransformerEncoderLayer(hidden_size, 2, 2 * hidden_size, dropout=0.0, batch_first=True, norm_first=True)
            self.norm = nn.LayerNorm(hidden_size)

        def forward(self, input_ids=None, attention_mask=None, past_key_values=None, position_ids=None):
            T = input_ids.shape[1]
            causal = nn.Transformer.generate_square_subsequent_mask(T)
            hidden = self.layer(self.embed_tokens(input_ids), src_mask=causal, is_causal=True)
            return (self.norm(hidden),)

    def __init__(self, vocab_size, hidden_size):
        super().__init__()
        self.model = self.Backbone(vocab_size, hidden_size)
        self.lm_head = nn.Linear(hidden_size, vocab_size, bias=False)


class MedusaModel(nn.Module):
    """The Medusa Language Model Head.

    This module creates a series of prediction heads (based on the 'medusa' parameter)
    on top of a given base model. Each head is composed of a sequence of residual blocks
    followed by a linear layer.
    """

    def __init__(
        self,
        base_model,
        medusa_num_heads=4,
        medusa_num_layers=1,
        base_model_name_or_path="lmsys/vicuna-7b-v1.3",
    ):
        """
        Args:
            base_model (nn.Module): The base language model to be used.
            medusa_num_heads (int, optional): Number of additional tokens to predict. Defaults to 3.
            medusa_num_layers (int, optional): Number of ResBlock layers for each Medusa head. Defaults to 0.
        """
        super().__init__()
        self.base_model = base_model
        self.hidden_size = base_model.lm_head.weight.shape[-1]
        self.vocab_size = base_model.lm_head.weight.shape[0]
        self.medusa = medusa_num_heads
        self.medusa_num_layers = medusa_num_layers
        self.base_model_name_or_path = base_model_name_or_path
        # Create a list of Medusa heads
        self.medusa_head = nn.ModuleList(
            [
                nn.Sequential(
                    *([ResBlock(self.hidden_size)] * medusa_num_layers),
                    nn.Linear(self.hidden_size, self.vocab_size, bias=False),
                )
                for _ in range(medusa_num_heads)
            ]
        )

        # Ensure medusa_head's dtype and device align with the base_model
        self.medusa_head.to(self.base_model.lm_head.weight.dtype).to(self.base_model.lm_head.weight.device)

        for i in range(medusa_num_heads):
            # Initialize the weights of each medusa_head using the base model's weights
            self.medusa_head[i][-1].weight.data[:] = base_model.lm_head.weight.data[:]

    def get_tokenizer(self):
        return self.tokenizer

    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        labels=None,
        past_key_values=None,
        output_orig=False,
        position_ids=None,
    ):
        """Forward pass of the MedusaModel.

        Args:
            input_ids (torch.Tensor, optional): Input token IDs.
            attention_mask (torch.Tensor, optional): Attention mask.
            labels (torch.Tensor, optional): Ground truth labels for loss computation.
            past_key_values (tuple, optional): Tuple containing past key and value states for attention.
            output_orig (bool, optional): Whether to also output predictions from the original LM head.
            position_ids (torch.Tensor, optional): Position IDs.

        Returns:
            torch.Tensor: A tensor containing predictions from all Medusa heads.
            (Optional) Original predictions from the base model's LM head.
        """
        with torch.inference_mode():
            # Pass input through the base model
            outputs = self.base_model.model(
                input_ids=input_ids,
                attention_mask=attention_mask,
                past_key_values=past_key_values,
                position_ids=position_ids,
            )
            if output_orig:
                orig = self.base_model.lm_head(outputs[0])
        # Clone the output hidden states
        hidden_states = outputs[0].clone()
        medusa_logits = []
        # TODO: Consider parallelizing this loop for efficiency?
        for i in range(self.medusa):
            medusa_logits.append(self.medusa_head[i](hidden_states))
        if output_orig:
            return torch.stack(medusa_logits, dim=0), outputs, orig
        return torch.stack(medusa_logits, dim=0)


class CustomizedTrainer:
    def __init__(self, model, learning_rate):
        self.model = model
        self.optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=learning_rate)
        self.logs = []

    def log(self, logs):
        self.logs.append(logs)

    def compute_loss(self, model, inputs, return_outputs=False):
        """
        Compute the training loss for the model.

        Args:
            model (torch.nn.Module): The model for which to compute the loss.
            inputs (dict): The input data, including input IDs, attention mask, and labels.
            return_outputs (bool): Whether to return model outputs along with the loss.

        Returns:
            Union[float, Tuple[float, torch.Tensor]]: The computed loss, optionally with model outputs.
        """
        # DDP will give us model.module
        if hasattr(model, "module"):
            medusa = model.module.medusa
        else:
            medusa = model.medusa

        logits = model(
            input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"]
        )
        labels = inputs["labels"]
        # Shift so that tokens < n predict n
        loss = 0
        loss_fct = CrossEntropyLoss()
        log = {}
        for i in range(medusa):
            medusa_logits = logits[i, :, : -(2 + i)].contiguous()
            medusa_labels = labels[..., 2 + i :].contiguous()
            medusa_logits = medusa_logits.view(-1, logits.shape[-1])
            medusa_labels = medusa_labels.view(-1)
            medusa_labels = medusa_labels.to(medusa_logits.device)
            loss_i = loss_fct(medusa_logits, medusa_labels)
            loss += loss_i
            not_ignore = medusa_labels.ne(IGNORE_TOKEN_ID)
            medusa_labels = medusa_labels[not_ignore]

            # Add top-k accuracy
            for k in range(1, 6):
                _, topk = medusa_logits.topk(k, dim=-1)
                topk = topk[not_ignore]
                correct = topk.eq(medusa_labels.unsqueeze(-1)).any(-1)
                log[f"medusa{i}_top{k}"] = correct.float().mean().item()

            log[f"medusa{i}_loss"] = loss_i.item()
        self.log(log)
        return (loss, logits) if return_outputs else loss

    def training_step(self, inputs):
        self.model.train()
        loss = self.compute_loss(self.model, inputs)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return loss.detach()
'''

TRAIN_SOURCE = """
base = TinyBaseLM(vocab_size=11, hidden_size=16)
initialize(base)
base.requires_grad_(False)
model = MedusaModel(base, medusa_num_heads=3, medusa_num_layers=2)
initialize(model.medusa_head)
record.append([n for n, p in model.named_parameters() if p.requires_grad])
record.append(sum(p.numel() for p in model.medusa_head.parameters()))
trainer = CustomizedTrainer(model, learning_rate=2e-2)
for raw in batches:
    input_ids = torch.tensor(raw)
    labels = input_ids.clone()
    labels[:, :2] = IGNORE_TOKEN_ID  # the prompt
    inputs = {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids), "labels": labels}
    loss = trainer.training_step(inputs)
    record.append(loss.item())
    record.append(params_of(model.medusa_head))
record.append([{k: v for k, v in log.items()} for log in trainer.logs][-1])

model.eval()
with torch.no_grad():
    medusa_logits, outputs, orig = model(input_ids=torch.tensor([batches[0][0]]), output_orig=True)
    # the candidates of medusa's generate: the base model's next token and each head's top-k
    candidates = [orig[0, -1].argmax().item()] + [medusa_logits[i, 0, -1].topk(2).indices.tolist() for i in range(model.medusa)]
    record.append(str(candidates))
    record.append(orig.numpy())
"""

STEPS = [
    ("\nimport torch\nimport torch.nn as nn\nfrom torch.nn import CrossEntropyLoss\n",
     "\nimport retrograd as torch\nimport retrograd.nn as nn\nfrom retrograd.nn import CrossEntropyLoss\n"),
    ("        loss.backward()\n        self.optimizer.step()\n",
     "        grads = loss.backward()\n        self.optimizer.step(grads)\n"),
]  # fmt: skip


def test_medusa_heads_train_on_a_frozen_base_under_inference_mode_as_torch(capsys):
    rng = np.random.default_rng(24801)
    batches = rng.integers(0, 11, (3, 2, 9)).tolist()
    (theirs, ours), _ = runs_with_draws(
        MEDUSA_SOURCE + TRAIN_SOURCE, STEPS, capsys, 24801, batches=batches,
        initialize=initializer(), params_of=params_of,
    )  # fmt: skip
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)
