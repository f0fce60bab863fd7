# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):

- DPO as its authors wrote it (github.com/eric-mitchell/direct-preference-optimization
  ``trainers.py`` and ``utils.py``), trained on a small causal LM: ``dpo_loss`` (``-F.logsigmoid
  (beta * logits)``, detached rewards, ``reference_free``), ``_get_batch_logps`` (``labels[:,
  1:].clone()``, ``labels[labels == -100] = 0``, ``torch.gather(logits.log_softmax(-1), dim=2,
  index=labels.unsqueeze(2)).squeeze(2)`` masked by a bool mask, summed or averaged),
  ``concatenated_inputs`` padding chosen and rejected by ``pad_to_length`` (``pad_value *
  torch.ones(*pad_size, dtype=tensor.dtype)`` of int64 ids and ``-100`` labels) and
  ``torch.cat``, ``concatenated_forward`` (``.logits.to(torch.float32)``), ``get_batch_metrics``
  (the reference pass under ``torch.no_grad()``, ``(chosen_rewards > rejected_rewards).float()``,
  ``.cpu().numpy().tolist()`` metrics), and ``BasicTrainer.train`` itself: the optimizer by
  ``getattr(torch.optim, self.config.optimizer)``, ``LambdaLR`` warm-up, seeding, microbatches
  by ``slice_and_move_batch_for_device`` with gradient accumulation, ``clip_grad_norm_(...).item()``,
  ``scheduler.step()``, and ``rank0_print`` of ``formatted_dict`` metrics; both the DPO and the
  SFT losses.

The port changes the gradient lines (``backward()`` returns the microbatch's gradients, summed
into ``self.grads``; ``clip_grad_norm_`` and ``step`` take them) and the imports. Left out:
``BasicTrainer.__init__`` (tokenizer and dataset loading: the test sets ``policy``,
``reference_model``, ``config``, ``train_iterator`` on ``BasicTrainer.__new__``), the FSDP and
tensor-parallel trainers, and the evaluation branch's wandb tables (never reached:
``eval_every`` exceeds the examples seen). The training loop's two
``slice_and_move_batch_for_device(..., self.rank)`` calls read ``'cpu'`` for their device
argument (the trainer moves each microbatch ``.to(rank)``, the GPU of that rank). The policy is a small embedding-GRU LM returning
an object with ``.logits``, as Hugging Face models do.
"""

from __future__ import annotations

import random
import types

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import assert_records_agree, port, ported_imports, run_source

DPO_SOURCE = '''
import torch
import torch.nn.functional as F
import torch.nn as nn
import torch.distributed as dist
import numpy as np
import random
import time
import json
from collections import defaultdict
from typing import Optional, Dict, List, Union, Tuple


def rank0_print(*args, **kwargs):
    """Print, but only on rank 0."""
    if not dist.is_initialized() or dist.get_rank() == 0:
        print(*args, **kwargs)


def slice_and_move_batch_for_device(batch: Dict, rank: int, world_size: int, device: str) -> Dict:
    """Slice a batch into chunks, and move each chunk to the specified device."""
    chunk_size = len(list(batch.values())[0]) // world_size
    start = chunk_size * rank
    end = chunk_size * (rank + 1)
    sliced = {k: v[start:end] for k, v in batch.items()}
    on_device = {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in sliced.items()}
    return on_device


def pad_to_length(tensor: torch.Tensor, length: int, pad_value: Union[int, float], dim: int = -1) -> torch.Tensor:
    if tensor.size(dim) >= length:
        return tensor
    else:
        pad_size = list(tensor.shape)
        pad_size[dim] = length - tensor.size(dim)
        return torch.cat([tensor, pad_value * torch.ones(*pad_size, dtype=tensor.dtype, device=tensor.device)], dim=dim)


def all_gather_if_needed(values: torch.Tensor, rank: int, world_size: int) -> torch.Tensor:
    """Gather and stack/cat values from all processes, if there are multiple processes."""
    if world_size == 1:
        return values

    all_values = [torch.empty_like(values).to(rank) for _ in range(world_size)]
    dist.all_gather(all_values, values)
    cat_function = torch.cat if values.dim() > 0 else torch.stack
    return cat_function(all_values, dim=0)


def formatted_dict(d: Dict) -> Dict:
    """Format a dictionary for printing."""
    return {k: (f"{v:.5g}" if type(v) == float else v) for k, v in d.items()}


def dpo_loss(policy_chosen_logps: torch.FloatTensor,
             policy_rejected_logps: torch.FloatTensor,
             reference_chosen_logps: torch.FloatTensor,
             reference_rejected_logps: torch.FloatTensor,
             beta: float,
             reference_free: bool = False) -> Tuple[torch.FloatTensor, torch.FloatTensor, torch.FloatTensor]:
    """Compute the DPO loss for a batch of policy and reference model log probabilities."""
    pi_logratios = policy_chosen_logps - policy_rejected_logps
    ref_logratios = reference_chosen_logps - reference_rejected_logps

    if reference_free:
        ref_logratios = 0

    logits = pi_logratios - ref_logratios

    losses = -F.logsigmoid(beta * logits)
    chosen_rewards = beta * (policy_chosen_logps - reference_chosen_logps).detach()
    rejected_rewards = beta * (policy_rejected_logps - reference_rejected_logps).detach()

    return losses, chosen_rewards, rejected_rewards


def _get_batch_logps(logits: torch.FloatTensor, labels: torch.LongTensor, average_log_prob: bool = False) -> torch.FloatTensor:
    """Compute the log probabilities of the given labels under the given logits."""
    assert logits.shape[:-1] == labels.shape

    labels = labels[:, 1:].clone()
    logits = logits[:, :-1, :]
    loss_mask = (labels != -100)

    # dummy token; we'll ignore the losses on these tokens later
    labels[labels == -100] = 0

    per_token_logps = torch.gather(logits.log_softmax(-1), dim=2, index=labels.unsqueeze(2)).squeeze(2)

    if average_log_prob:
        return (per_token_logps * loss_mask).sum(-1) / loss_mask.sum(-1)
    else:
        return (per_token_logps * loss_mask).sum(-1)


def concatenated_inputs(batch: Dict[str, Union[List, torch.LongTensor]]) -> Dict[str, torch.LongTensor]:
    """Concatenate the chosen and rejected inputs into a single tensor."""
    max_length = max(batch['chosen_input_ids'].shape[1], batch['rejected_input_ids'].shape[1])
    concatenated_batch = {}
    for k in batch:
        if k.startswith('chosen') and isinstance(batch[k], torch.Tensor):
            pad_value = -100 if 'labels' in k else 0
            concatenated_key = k.replace('chosen', 'concatenated')
            concatenated_batch[concatenated_key] = pad_to_length(batch[k], max_length, pad_value=pad_value)
    for k in batch:
        if k.startswith('rejected') and isinstance(batch[k], torch.Tensor):
            pad_value = -100 if 'labels' in k else 0
            concatenated_key = k.replace('rejected', 'concatenated')
            concatenated_batch[concatenated_key] = torch.cat((
                concatenated_batch[concatenated_key],
                pad_to_length(batch[k], max_length, pad_value=pad_value),
            ), dim=0)
    return concatenated_batch


class BasicTrainer(object):
    def concatenated_forward(self, model: nn.Module, batch: Dict[str, Union[List, torch.LongTensor]]) -> Tuple[torch.FloatTensor, torch.FloatTensor]:
        """Run the given model on the given batch of inputs, concatenating the chosen and rejected inputs together.

           We do this to avoid doing two forward passes, because it's faster for FSDP.
        """
        concatenated_batch = concatenated_inputs(batch)
        all_logits = model(concatenated_batch['concatenated_input_ids'], attention_mask=concatenated_batch['concatenated_attention_mask']).logits.to(torch.float32)
        all_logps = _get_batch_logps(all_logits, concatenated_batch['concatenated_labels'], average_log_prob=False)
        chosen_logps = all_logps[:batch['chosen_input_ids'].shape[0]]
        rejected_logps = all_logps[batch['chosen_input_ids'].shape[0]:]
        return chosen_logps, rejected_logps


    def get_batch_metrics(self, batch: Dict[str, Union[List, torch.LongTensor]], loss_config, train=True):
        """Compute the SFT or DPO loss and other metrics for the given batch of inputs."""

        metrics = {}
        train_test = 'train' if train else 'eval'

        if loss_config.name == 'dpo':
            policy_chosen_logps, policy_rejected_logps = self.concatenated_forward(self.policy, batch)
            with torch.no_grad():
                reference_chosen_logps, reference_rejected_logps = self.concatenated_forward(self.reference_model, batch)

            losses, chosen_rewards, rejected_rewards = dpo_loss(
                policy_chosen_logps, policy_rejected_logps, reference_chosen_logps, reference_rejected_logps, beta=loss_config.beta, reference_free=loss_config.reference_free)
            reward_accuracies = (chosen_rewards > rejected_rewards).float()

            chosen_rewards = all_gather_if_needed(chosen_rewards, self.rank, self.world_size)
            rejected_rewards = all_gather_if_needed(rejected_rewards, self.rank, self.world_size)
            reward_accuracies = all_gather_if_needed(reward_accuracies, self.rank, self.world_size)

            metrics[f'rewards_{train_test}/chosen'] = chosen_rewards.cpu().numpy().tolist()
            metrics[f'rewards_{train_test}/rejected'] = rejected_rewards.cpu().numpy().tolist()
            metrics[f'rewards_{train_test}/accuracies'] = reward_accuracies.cpu().numpy().tolist()
            metrics[f'rewards_{train_test}/margins'] = (chosen_rewards - rejected_rewards).cpu().numpy().tolist()

            policy_rejected_logps = all_gather_if_needed(policy_rejected_logps.detach(), self.rank, self.world_size)
            metrics[f'logps_{train_test}/rejected'] = policy_rejected_logps.cpu().numpy().tolist()

        elif loss_config.name == 'sft':
            policy_chosen_logits = self.policy(batch['chosen_input_ids'], attention_mask=batch['chosen_attention_mask']).logits.to(torch.float32)
            policy_chosen_logps = _get_batch_logps(policy_chosen_logits, batch['chosen_labels'], average_log_prob=False)

            losses = -policy_chosen_logps

        policy_chosen_logps = all_gather_if_needed(policy_chosen_logps.detach(), self.rank, self.world_size)
        metrics[f'logps_{train_test}/chosen'] = policy_chosen_logps.cpu().numpy().tolist()

        all_devices_losses = all_gather_if_needed(losses.detach(), self.rank, self.world_size)
        metrics[f'loss/{train_test}'] = all_devices_losses.cpu().numpy().tolist()

        return losses.mean(), metrics

    def train(self):
        """Begin either SFT or DPO training, with periodic evaluation."""

        rank0_print(f'Using {self.config.optimizer} optimizer')
        self.optimizer = getattr(torch.optim, self.config.optimizer)(self.policy.parameters(), lr=self.config.lr)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lr_lambda=lambda step: min(1.0, (step + 1) / (self.config.warmup_steps + 1)))

        torch.manual_seed(self.seed)
        np.random.seed(self.seed)
        random.seed(self.seed)

        if self.config.loss.name == 'dpo':
            self.reference_model.eval()

        self.example_counter = 0
        self.batch_counter = 0
        last_log = None

        for batch in self.train_iterator:
            #### BEGIN EVALUATION ####
            if self.example_counter % self.config.eval_every == 0 and (self.example_counter > 0 or self.config.do_first_eval):
                rank0_print(f'Running evaluation after {self.example_counter} train examples')
                self.policy.eval()
            #### END EVALUATION ####

            #### BEGIN TRAINING ####
            self.policy.train()

            start_time = time.time()
            batch_metrics = defaultdict(list)
            for microbatch_idx in range(self.config.gradient_accumulation_steps):
                global_microbatch = slice_and_move_batch_for_device(batch, microbatch_idx, self.config.gradient_accumulation_steps, 'cpu')
                local_microbatch = slice_and_move_batch_for_device(global_microbatch, self.rank, self.world_size, 'cpu')
                loss, metrics = self.get_batch_metrics(local_microbatch, self.config.loss, train=True)
                (loss / self.config.gradient_accumulation_steps).backward()

                for k, v in metrics.items():
                    batch_metrics[k].extend(v)

            grad_norm = self.clip_gradient()
            self.optimizer.step()
            self.scheduler.step()
            self.optimizer.zero_grad()

            step_time = time.time() - start_time
            examples_per_second = self.config.batch_size / step_time
            batch_metrics['examples_per_second'].append(examples_per_second)
            batch_metrics['grad_norm'].append(grad_norm)

            self.batch_counter += 1
            self.example_counter += self.config.batch_size

            if last_log is None or time.time() - last_log > self.config.minimum_log_interval_secs:
                mean_train_metrics = {k: sum(v) / len(v) for k, v in batch_metrics.items()}
                mean_train_metrics['counters/examples'] = self.example_counter
                mean_train_metrics['counters/updates'] = self.batch_counter
                rank0_print(f'train stats after {self.example_counter} examples: {formatted_dict(mean_train_metrics)}')
                self.history.append(mean_train_metrics)  # (the test's record)

                last_log = time.time()
            else:
                rank0_print(f'skipping logging after {self.example_counter} examples to avoid logging too frequently')
            #### END TRAINING ####


    def clip_gradient(self):
        """Clip the gradient norm of the parameters of a non-FSDP policy."""
        return torch.nn.utils.clip_grad_norm_(self.policy.parameters(), self.config.max_grad_norm).item()


class TinyCausalLM(nn.Module):  # (the test's stand-in for a Hugging Face causal LM)
    def __init__(self, vocab_size, dim):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, dim)
        self.rnn = nn.GRU(dim, dim, batch_first=True)
        self.head = nn.Linear(dim, vocab_size)

    def forward(self, input_ids, attention_mask=None):
        hidden, _ = self.rnn(self.embed(input_ids) * attention_mask.unsqueeze(-1))
        return types.SimpleNamespace(logits=self.head(hidden))
'''

DPO_PORT = [
    (
        "import torch\nimport torch.nn.functional as F\nimport torch.nn as nn\nimport torch.distributed as dist\n",
        "import retrograd as torch\nimport retrograd.nn.functional as F\nimport retrograd.nn as nn\nimport retrograd.distributed as dist\n",
    ),
    (
        "                (loss / self.config.gradient_accumulation_steps).backward()\n",
        "                microbatch_grads = (loss / self.config.gradient_accumulation_steps).backward()\n"
        "                self.grads = microbatch_grads if microbatch_idx == 0 else self.grads + microbatch_grads\n",
    ),
    ("            self.optimizer.step()\n", "            self.optimizer.step(self.grads)\n"),
    (
        "clip_grad_norm_(self.policy.parameters(), self.config.max_grad_norm)",
        "clip_grad_norm_(self.grads, self.policy.parameters(), self.config.max_grad_norm)",
    ),
]


def _batches(lib, rng, n_batches, batch_size):
    """Preference batches as the repo's collate makes them: prompt + response ids, labels -100
    over the prompt, chosen and rejected of different lengths."""
    batches = []
    for _ in range(n_batches):
        batch = {}
        for kind, length in (("chosen", 7), ("rejected", 9)):
            ids = rng.integers(1, 13, (batch_size, length))
            mask = np.ones((batch_size, length), dtype=np.int64)
            labels = ids.copy()
            labels[:, :3] = -100  # the prompt
            labels[0, -2:] = -100  # a padded response
            mask[0, -2:] = 0
            batch[f"{kind}_input_ids"] = lib.tensor(ids)
            batch[f"{kind}_attention_mask"] = lib.tensor(mask)
            batch[f"{kind}_labels"] = lib.tensor(labels)
        batch["prompt"] = ["a prompt"] * batch_size
        batches.append(batch)
    return batches


@pytest.mark.parametrize(
    ("loss_name", "reference_free"), [("dpo", False), ("dpo", True), ("sft", False)]
)
def test_eric_mitchell_dpo_trainer_trains_as_torch(capsys, loss_name, reference_free):
    theirs = run_source(DPO_SOURCE, torch, types=types)
    ours = run_source(ported_imports(port(DPO_SOURCE, DPO_PORT)), rg, types=types)
    records, logs, initial = [], [], None
    for lib, names in ((torch, theirs), (rg, ours)):
        torch.manual_seed(0)
        policy = names["TinyCausalLM"](13, 6)
        reference = names["TinyCausalLM"](13, 6)
        if initial is None:
            initial = [
                {k: v.detach().numpy().copy() for k, v in m.state_dict().items()}
                for m in (policy, reference)
            ]
        else:
            for module, state in zip((policy, reference), initial):
                module.load_state_dict({k: rg.tensor(v) for k, v in state.items()})
        trainer = names["BasicTrainer"].__new__(names["BasicTrainer"])
        trainer.policy, trainer.reference_model = policy, reference
        trainer.seed, trainer.rank, trainer.world_size, trainer.history = 0, 0, 1, []
        trainer.config = types.SimpleNamespace(
            optimizer="RMSprop",
            lr=3e-2,
            warmup_steps=2,
            eval_every=1000,
            do_first_eval=False,
            gradient_accumulation_steps=2,
            batch_size=4,
            max_grad_norm=1.0,
            minimum_log_interval_secs=-1.0,
            loss=types.SimpleNamespace(name=loss_name, beta=0.5, reference_free=reference_free),
        )
        trainer.train_iterator = _batches(lib, np.random.default_rng(485), 3, 4)
        python_state, numpy_state = random.getstate(), np.random.get_state()
        try:  # (train() seeds Python's and NumPy's global streams: put them back)
            trainer.train()
        finally:
            random.setstate(python_state)
            np.random.set_state(numpy_state)
        history = [
            {k: v for k, v in h.items() if k != "examples_per_second"} for h in trainer.history
        ]
        records.append(
            [*history, {n: p.detach().numpy().copy() for n, p in policy.named_parameters()}]
        )
        logs.append(capsys.readouterr().out)
    assert logs[1].splitlines()[0] == logs[0].splitlines()[0] == "Using RMSprop optimizer"
    assert [h["counters/updates"] for h in records[0][:3]] == [1, 2, 3]
    assert_records_agree(records[1], records[0], rtol=2e-4, atol=2e-5)
