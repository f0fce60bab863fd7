# ruff: noqa: E501  (the programs are kept as their authors wrote them: long lines)
"""Real PyTorch programs ported to retrograd (the harness: ``tests/real_ports.py``): a PyTorch
Lightning style program without Lightning -- a ``LightningModule``-shaped class
(``training_step``, ``validation_step``, ``configure_optimizers`` returning Lightning's
``{"optimizer": ..., "lr_scheduler": {"scheduler": ..., "monitor": "val_loss", "interval":
...}}``) driven by the fit loop Lightning runs (``zero_grad``, ``manual_backward``,
``gradient_clip_algorithm="value"`` through ``clip_grad_value_``, ``optimizer.step``, the
``interval="step"`` schedulers stepped per batch, ``ReduceLROnPlateau`` stepped with the
monitored metric, as ``_update_learning_rates`` does), over variable-length sequences fed by
``torch.utils.data`` as tutorials write it:

- a map-style dataset batched by a length-bucketing ``BatchSampler`` subclass over a
  ``SequentialSampler`` and a ``collate_fn`` that pads with ``pad_sequence``;
- an ``IterableDataset`` splitting its stream with ``get_worker_info()`` (torch's docs'
  example), read by two workers with ``persistent_workers=True`` and ``pin_memory=True``;
- an ``nn.LSTM`` over ``pack_padded_sequence(..., enforce_sorted=False)`` and
  ``pad_packed_sequence``;
- ``CosineAnnealingWarmRestarts`` stepped with a fractional epoch (``scheduler.step(epoch + i /
  iters)``, its docs' form) next to ``ReduceLROnPlateau`` on the validation loss, with their
  state dicts.

The lines changed: the ``import`` lines and the gradient lines.
"""

from __future__ import annotations

import math
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


LIGHTNING_LIKE_SOURCE = '''
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence, pad_sequence
from torch.utils.data import BatchSampler, DataLoader, Dataset, IterableDataset, SequentialSampler, get_worker_info


class SequenceDataset(Dataset):
    def __init__(self, sequences, labels):
        self.sequences = sequences
        self.labels = labels

    def __len__(self):
        return len(self.sequences)

    def __getitem__(self, idx):
        return self.sequences[idx], self.labels[idx]


class SequenceStream(IterableDataset):
    def __init__(self, sequences, labels):
        super().__init__()
        self.sequences = sequences
        self.labels = labels

    def __iter__(self):
        worker_info = get_worker_info()
        if worker_info is None:  # single-process data loading, return the full iterator
            iter_start = 0
            iter_end = len(self.sequences)
        else:  # in a worker process
            # split workload
            per_worker = int(math.ceil(len(self.sequences) / float(worker_info.num_workers)))
            worker_id = worker_info.id
            iter_start = worker_id * per_worker
            iter_end = min(iter_start + per_worker, len(self.sequences))
        return iter(zip(self.sequences[iter_start:iter_end], self.labels[iter_start:iter_end]))


class BucketBatchSampler(BatchSampler):
    """Batches of similar lengths: the sampler's indices sorted by length within each chunk."""

    def __init__(self, sampler, batch_size, drop_last, lengths):
        super().__init__(sampler, batch_size, drop_last)
        self.lengths = lengths

    def __iter__(self):
        for batch in super().__iter__():
            yield sorted(batch, key=lambda i: -self.lengths[i])


def collate_fn(batch):
    sequences, labels = zip(*batch)
    lengths = torch.tensor([len(s) for s in sequences])
    padded = pad_sequence(list(sequences), batch_first=True, padding_value=0)
    return padded, lengths, torch.stack(list(labels))


class LitClassifier(nn.Module):
    def __init__(self, vocab_size=12, embed_dim=6, hidden_dim=8, num_classes=3, lr=0.02):
        super().__init__()
        self.hparams = {"lr": lr}
        self.embedding = nn.Embedding(vocab_size, embed_dim, padding_idx=0)
        self.lstm = nn.LSTM(embed_dim, hidden_dim, batch_first=True, bidirectional=True)
        self.classifier = nn.Linear(2 * hidden_dim, num_classes)
        self.loss_fn = nn.CrossEntropyLoss()

    def forward(self, x, lengths):
        embedded = self.embedding(x)
        packed = pack_padded_sequence(embedded, lengths, batch_first=True, enforce_sorted=False)
        output, (h_n, c_n) = self.lstm(packed)
        output, output_lengths = pad_packed_sequence(output, batch_first=True)
        mask = (torch.arange(output.size(1))[None, :] < output_lengths[:, None]).unsqueeze(-1)
        pooled = (output * mask).sum(1) / output_lengths[:, None]
        return self.classifier(pooled + torch.cat([h_n[0], h_n[1]], dim=-1))

    def training_step(self, batch, batch_idx):
        x, lengths, y = batch
        loss = self.loss_fn(self(x, lengths), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, lengths, y = batch
        logits = self(x, lengths)
        loss = self.loss_fn(logits, y)
        acc = (logits.argmax(dim=-1) == y).float().mean()
        return {"val_loss": loss, "val_acc": acc}

    def configure_optimizers(self):
        optimizer = torch.optim.Adam(self.parameters(), lr=self.hparams["lr"])
        return {
            "optimizer": optimizer,
            "lr_scheduler": [
                {"scheduler": torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(optimizer, T_0=2, T_mult=2, eta_min=1e-3), "interval": "step"},
                {"scheduler": torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode="min", factor=0.5, patience=0, threshold=0.5, threshold_mode="rel"), "monitor": "val_loss", "interval": "epoch"},
            ],
        }

    def log(self, name, value):
        self.logged[name] = float(value)

    def manual_backward(self, loss):
        loss.backward()


def fit(module, train_dataloader, val_dataloader, max_epochs, gradient_clip_val):
    config = module.configure_optimizers()
    optimizer = config["optimizer"]
    schedulers = config["lr_scheduler"]
    module.logged = {}
    iters = len(train_dataloader)
    for epoch in range(max_epochs):
        module.train()
        for batch_idx, batch in enumerate(train_dataloader):
            loss = module.training_step(batch, batch_idx)
            optimizer.zero_grad()
            module.manual_backward(loss)
            torch.nn.utils.clip_grad_value_(module.parameters(), clip_value=gradient_clip_val)
            optimizer.step()
            for config in schedulers:
                if config["interval"] == "step":
                    config["scheduler"].step(epoch + (batch_idx + 1) / iters)
            record.append(module.logged["train_loss"])
            record.append(optimizer.param_groups[0]["lr"])
        module.eval()
        outputs = []
        with torch.no_grad():
            for batch_idx, batch in enumerate(val_dataloader):
                outputs.append(module.validation_step(batch, batch_idx))
        val_loss = torch.stack([o["val_loss"] for o in outputs]).mean()
        record.append(float(val_loss))
        record.append(float(torch.stack([o["val_acc"] for o in outputs]).mean()))
        for config in schedulers:
            if config["interval"] == "epoch":
                if isinstance(config["scheduler"], torch.optim.lr_scheduler.ReduceLROnPlateau):
                    config["scheduler"].step(val_loss.item())
                else:
                    config["scheduler"].step()
        record.append(optimizer.param_groups[0]["lr"])
        record.append(params_of(module))
    plateau = schedulers[1]["scheduler"].state_dict()
    record.append(plateau.pop("best"))  # (a loss: compared to float tolerance, the rest exactly)
    record.append(repr(sorted(plateau.items())))
    record.append(repr(sorted((k, v) for k, v in schedulers[0]["scheduler"].state_dict().items() if k != "_last_lr")))


generator = np.random.default_rng(0)
def make_split(n):
    lengths = generator.integers(2, 7, size=n)
    sequences = [torch.tensor(generator.integers(1, 12, size=int(l))) for l in lengths]
    labels = [torch.tensor(int(s.sum()) % 3) for s in sequences]
    return sequences, labels

train_sequences, train_labels = make_split(14)
val_sequences, val_labels = make_split(9)
train_set = SequenceDataset(train_sequences, train_labels)
train_dataloader = DataLoader(
    train_set,
    batch_sampler=BucketBatchSampler(SequentialSampler(train_set), batch_size=4, drop_last=False, lengths=[len(s) for s in train_sequences]),
    collate_fn=collate_fn,
    pin_memory=True,
)
val_dataloader = DataLoader(SequenceStream(val_sequences, val_labels), batch_size=3, collate_fn=collate_fn, num_workers=2, persistent_workers=True, pin_memory=True)
record.append(repr([[len(s) for s in x] for x, lengths, y in val_dataloader]))
module = LitClassifier()
initialize(module)
fit(module, train_dataloader, val_dataloader, max_epochs=4, gradient_clip_val=0.05)
'''

LIGHTNING_LIKE_STEPS = [
    (
        "import torch\nfrom torch import nn\n",
        "import retrograd as torch\nfrom retrograd import nn\n",
    ),
    (
        "    def manual_backward(self, loss):\n        loss.backward()\n",
        "    def manual_backward(self, loss):\n        return loss.backward()\n",
    ),
    (
        "            module.manual_backward(loss)\n            torch.nn.utils.clip_grad_value_(module.parameters(), clip_value=gradient_clip_val)\n            optimizer.step()\n",
        "            grads = module.manual_backward(loss)\n            torch.nn.utils.clip_grad_value_(grads, module.parameters(), clip_value=gradient_clip_val)\n            optimizer.step(grads)\n",
    ),
]


def test_lightning_like_fit_loop_over_packed_sequences_trains_as_torch(capsys):
    (theirs, ours), _ = runs_with_draws(
        LIGHTNING_LIKE_SOURCE, LIGHTNING_LIKE_STEPS, capsys, 21501, initialize=initializer(),
        params_of=params_of, math=math,
    )  # fmt: skip
    # the stream split between the two workers, their batches interleaved as torch's loader does
    assert theirs[0] == ours[0]
    assert_records_agree(ours, theirs, rtol=2e-4, atol=1e-5)
