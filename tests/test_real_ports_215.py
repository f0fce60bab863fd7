# ruff: noqa: E501  (the program keeps a few long data-loader and scheduler lines)
"""Real ports (the harness: ``tests/real_ports.py``): a program written here in the style of
PyTorch Lightning code without Lightning -- a ``LightningModule``-shaped class
(``training_step``, ``validation_step``, ``configure_optimizers`` returning Lightning's
``{"optimizer": ..., "lr_scheduler": [{"scheduler": ..., "interval": ..., "monitor":
"val_loss"}]}``, ``log``, ``manual_backward``) driven by the loop a Trainer runs
(``zero_grad``, ``manual_backward``, ``clip_grad_value_(..., clip_value=...)``, ``step``, the
``interval="step"`` scheduler stepped per batch, ``ReduceLROnPlateau`` stepped with the
monitored loss), over variable-length sequences fed by ``torch.utils.data`` (imported as
``tud``):

- a map-style dataset batched by a longest-first ``BatchSampler`` subclass over a
  ``SequentialSampler`` and a ``collate_fn`` padding with ``pad_sequence(batch_first=True,
  padding_value=0)``;
- an ``IterableDataset`` sharding its items by ``get_worker_info()``, read by two workers with
  ``persistent_workers=True`` and ``pin_memory=True``;
- an ``nn.Embedding(padding_idx=0)`` and a bidirectional ``nn.LSTM`` over
  ``pack_padded_sequence(..., enforce_sorted=False)`` and ``pad_packed_sequence``, pooled by an
  ``arange < lengths`` mask, with both directions' final states;
- ``CosineAnnealingWarmRestarts`` stepped with a fractional epoch (``step(epoch + i / n)``)
  next to ``ReduceLROnPlateau`` on the validation loss, with their state dicts.

The port changes the imports and the gradient lines.
"""

from __future__ import annotations

import math

from real_ports import (
    assert_records_agree,
    initializer,
    params_of,
    runs_with_draws,
    seeded_draws,  # noqa: F401 (autouse: each test from fixed seeds)
)

LIGHTNING_LIKE_SOURCE = """
import torch
import torch.utils.data as tud
from torch import nn
from torch.nn.utils import rnn as rnn_utils


class PairsDataset(tud.Dataset):
    def __init__(self, items):
        self.items = items  # (token tensor, label tensor) pairs

    def __len__(self):
        return len(self.items)

    def __getitem__(self, index):
        return self.items[index]


class ShardedStream(tud.IterableDataset):
    # each loader worker reads its own contiguous shard of the items
    def __init__(self, items):
        super().__init__()
        self.items = items

    def __iter__(self):
        info = tud.get_worker_info()
        if info is None:
            return iter(self.items)
        shard = math.ceil(len(self.items) / info.num_workers)
        return iter(self.items[info.id * shard : (info.id + 1) * shard])


class LongestFirstBatches(tud.BatchSampler):
    def __init__(self, sampler, batch_size, drop_last, sizes):
        super().__init__(sampler, batch_size=batch_size, drop_last=drop_last)
        self.sizes = sizes

    def __iter__(self):
        for indices in super().__iter__():
            yield sorted(indices, key=lambda k: self.sizes[k], reverse=True)


def pad_batch(pairs):
    tokens, labels = zip(*pairs)
    lengths = torch.tensor([len(t) for t in tokens])
    return rnn_utils.pad_sequence(list(tokens), batch_first=True, padding_value=0), lengths, torch.stack(list(labels))


class SequenceClassifier(nn.Module):
    # shaped like a LightningModule: steps, optimizer configuration, log and manual_backward
    def __init__(self, vocab=12, width=6, hidden=8, classes=3, lr=0.02):
        super().__init__()
        self.lr = lr
        self.embed = nn.Embedding(vocab, width, padding_idx=0)
        self.encoder = nn.LSTM(width, hidden, batch_first=True, bidirectional=True)
        self.head = nn.Linear(2 * hidden, classes)
        self.criterion = nn.CrossEntropyLoss()
        self.metrics = {}

    def forward(self, tokens, lengths):
        packed = rnn_utils.pack_padded_sequence(self.embed(tokens), lengths, batch_first=True, enforce_sorted=False)
        states, (h_last, _) = self.encoder(packed)
        states, lengths = rnn_utils.pad_packed_sequence(states, batch_first=True)
        valid = torch.arange(states.size(1))[None, :] < lengths[:, None]
        mean_state = (states * valid.unsqueeze(-1)).sum(1) / lengths[:, None]
        both_ends = torch.cat([h_last[0], h_last[1]], dim=-1)  # forward and backward final states
        return self.head(mean_state + both_ends)

    def log(self, key, value):
        self.metrics[key] = float(value)

    def manual_backward(self, objective):
        objective.backward()

    def training_step(self, batch, index):
        tokens, lengths, labels = batch
        loss = self.criterion(self(tokens, lengths), labels)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, index):
        tokens, lengths, labels = batch
        scores = self(tokens, lengths)
        hits = (scores.argmax(dim=-1) == labels).float().mean()
        return {"val_loss": self.criterion(scores, labels), "val_acc": hits}

    def configure_optimizers(self) -> dict:
        opt = torch.optim.Adam(self.parameters(), lr=self.lr)
        warm = torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(opt, T_0=2, T_mult=2, eta_min=1e-3)
        plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(
            opt, mode="min", factor=0.5, patience=0, threshold=0.5, threshold_mode="rel"
        )
        return {
            "optimizer": opt,
            "lr_scheduler": [
                {"scheduler": warm, "interval": "step"},
                {"scheduler": plateau, "interval": "epoch", "monitor": "val_loss"},
            ],
        }


def run_trainer(model, train_loader, val_loader, epochs, clip):
    # the loop a Lightning Trainer runs, written out
    setup = model.configure_optimizers()
    opt, schedules = setup["optimizer"], setup["lr_scheduler"]
    per_epoch = len(train_loader)
    for epoch in range(epochs):
        model.train()
        for batch_idx, batch in enumerate(train_loader):
            loss = model.training_step(batch, batch_idx)
            opt.zero_grad()
            model.manual_backward(loss)
            torch.nn.utils.clip_grad_value_(model.parameters(), clip_value=clip)
            opt.step()
            for entry in schedules:
                if entry["interval"] == "step":
                    entry["scheduler"].step(epoch + (batch_idx + 1) / per_epoch)  # fractional epochs
            record.append([model.metrics["train_loss"], opt.param_groups[0]["lr"]])
        model.eval()
        with torch.no_grad():
            results = [model.validation_step(b, i) for i, b in enumerate(val_loader)]
        val_loss = torch.stack([r["val_loss"] for r in results]).mean()
        val_acc = torch.stack([r["val_acc"] for r in results]).mean()
        record.append([float(val_loss), float(val_acc)])
        for entry in schedules:
            if entry["interval"] == "epoch":
                entry["scheduler"].step(val_loss.item())
        record.append(opt.param_groups[0]["lr"])
        record.append(params_of(model))
    plateau_state = schedules[1]["scheduler"].state_dict()
    record.append(plateau_state.pop("best"))  # a loss: to float tolerance, the rest exactly
    record.append(repr(sorted(plateau_state.items())))
    restarts_state = schedules[0]["scheduler"].state_dict()
    record.append(repr(sorted((k, v) for k, v in restarts_state.items() if k != "_last_lr")))


draw = np.random.default_rng(0)


def make_pairs(count):
    pairs = []
    for size in draw.integers(2, 7, size=count):
        tokens = torch.tensor(draw.integers(1, 12, size=int(size)))
        pairs.append((tokens, torch.tensor(int(tokens[0]) % 3)))  # the class is set by the first token
    return pairs


train_pairs, val_pairs = make_pairs(14), make_pairs(9)
train_loader = tud.DataLoader(
    PairsDataset(train_pairs),
    batch_sampler=LongestFirstBatches(
        tud.SequentialSampler(train_pairs), batch_size=4, drop_last=False,
        sizes=[len(t) for t, _ in train_pairs],
    ),
    collate_fn=pad_batch,
    pin_memory=True,
)
val_loader = tud.DataLoader(
    ShardedStream(val_pairs), batch_size=3, collate_fn=pad_batch,
    num_workers=2, persistent_workers=True, pin_memory=True,
)
record.append(repr([lengths.tolist() for _, lengths, _ in val_loader]))
model = SequenceClassifier()
initialize(model)
run_trainer(model, train_loader, val_loader, epochs=4, clip=0.05)
"""

LIGHTNING_LIKE_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("import torch.utils.data as tud\n", "import retrograd.utils.data as tud\n"),
    ("        objective.backward()\n", "        return objective.backward()\n"),
    (
        "            model.manual_backward(loss)\n",
        "            grads = model.manual_backward(loss)\n",
    ),
    ("clip_grad_value_(model.parameters(),", "clip_grad_value_(grads, model.parameters(),"),
    ("            opt.step()\n", "            opt.step(grads)\n"),
]


def test_lightning_like_fit_loop_over_packed_sequences_trains_as_torch(capsys):
    (theirs, ours), _ = runs_with_draws(
        LIGHTNING_LIKE_SOURCE, LIGHTNING_LIKE_STEPS, capsys, 21501, initialize=initializer(),
        params_of=params_of, math=math,
    )  # fmt: skip
    # the stream split between the two workers, their batches interleaved as torch's loader does
    assert theirs[0] == ours[0]
    assert_records_agree(ours, theirs, rtol=2e-4, atol=1e-5)
