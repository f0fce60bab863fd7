"""A program written here in the style of Bjarten/early-stopping-pytorch (an ``EarlyStopping``
helper that checkpoints the best weights, and an MNIST training loop that uses it), run under
torch and, ported, under retrograd from the same weights and images (the harness:
``tests/real_ports.py``).

What it exercises: the stopper's call on each epoch's validation loss (``np.isnan`` skip, best
loss with a ``min_delta``, the patience counter and its trace messages through a ``log``
callable), ``torch.save(net.state_dict(), self.path)`` into ``best.pt`` in the working
directory on each improvement and ``net.load_state_dict(torch.load("best.pt"))`` of the best
epoch at the end; an MLP on flattened digits (``images.view(-1, SIDE * SIDE)``, ``F.relu``,
``nn.Dropout``) trained by Adam at its defaults with ``nn.CrossEntropyLoss``; the data split by
``np.random.shuffle`` of indices and ``np.floor``, ``torch.utils.data.Subset`` and
``TensorDataset`` batched by ``DataLoader(num_workers=0)``; ``np.average`` of per-batch
``loss.item()`` values; f-string progress lines with nested format specs (``{epoch:>{width}}``).

What stands in: MNIST by random 14x14 images with random labels (the model can only memorize,
so the validation loss turns up and the patience runs out); the split's batches keep the
shuffled order (a sampler would draw each library's own order); dropout is 0 (each library's
own masks otherwise). Both runs are in float64 (the default dtype): Adam divides each weight's
gradient by its own running scale, so weights whose summed gradient nearly cancels would follow
float32's rounding noise. The port changes the import lines and the gradient lines;
``initialize`` gives it torch's weights. The checkpoint retrograd writes is also read back by
torch's own ``torch.load``.
"""

from __future__ import annotations

import random

import numpy as np
import torch

import retrograd as rg
from real_ports import SharedDraws, assert_records_agree, initializer, port, run_source

EARLY_STOPPING_SOURCE = """
import numpy as np
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, Subset, TensorDataset

SIDE = 14


class EarlyStopping:
    # stop when the validation loss has not improved by min_delta for `patience` epochs,
    # keeping the best weights on disk
    def __init__(self, patience=3, min_delta=0.0, path="best.pt", log=print):
        self.patience = patience
        self.min_delta = min_delta
        self.path = path
        self.log = log
        self.best = None
        self.lowest = np.inf
        self.bad_epochs = 0
        self.should_stop = False

    def __call__(self, val_loss, net):
        if np.isnan(val_loss):
            self.log("validation loss is NaN; epoch ignored")
            return
        if self.best is not None and val_loss >= self.best - self.min_delta:
            self.bad_epochs += 1
            self.log(f"no improvement for {self.bad_epochs} of {self.patience} epochs")
            self.should_stop = self.bad_epochs >= self.patience
            return
        self.best = val_loss
        self.bad_epochs = 0
        self.log(f"Validation loss {self.lowest:.6f} -> {val_loss:.6f}, saving {self.path}")
        torch.save(net.state_dict(), self.path)
        self.lowest = val_loss


class DigitMLP(nn.Module):
    def __init__(self, hidden=32):
        super().__init__()
        self.inp = nn.Linear(SIDE * SIDE, hidden)
        self.mid = nn.Linear(hidden, hidden)
        self.out = nn.Linear(hidden, 10)
        self.drop = nn.Dropout(0.25)

    def forward(self, images):
        h = images.view(-1, SIDE * SIDE)
        h = self.drop(F.relu(self.inp(h)))
        h = self.drop(F.relu(self.mid(h)))
        return self.out(h)


def loaders(batch_size, holdout=0.25):
    images = torch.rand(48, 1, SIDE, SIDE)
    labels = torch.randint(0, 10, (48,))
    full = TensorDataset(images, labels)
    order = list(range(len(full)))
    np.random.shuffle(order)
    cut = int(np.floor(holdout * len(full)))
    fit = DataLoader(Subset(full, order[cut:]), batch_size=batch_size, num_workers=0)
    held = DataLoader(Subset(full, order[:cut]), batch_size=batch_size, num_workers=0)
    return fit, held


net = DigitMLP()
initialize(net)
net.drop.p = 0.0  # (each library would draw its own dropout masks)
print(net)
loss_fn = nn.CrossEntropyLoss()
opt = torch.optim.Adam(net.parameters())
fit_loader, held_loader = loaders(batch_size=12)

max_epochs = 12
width = len(str(max_epochs))
stopper = EarlyStopping(patience=2)
fit_history, held_history = [], []
for epoch in range(1, max_epochs + 1):
    net.train()
    batch_losses = []
    for images, labels in fit_loader:
        opt.zero_grad()
        loss = loss_fn(net(images), labels)
        loss.backward()
        opt.step()
        batch_losses.append(loss.item())
    net.eval()
    with torch.no_grad():
        held_losses = [loss_fn(net(images), labels).item() for images, labels in held_loader]
    fit_history.append(np.average(batch_losses))
    held_history.append(np.average(held_losses))
    losses = f"fit {fit_history[-1]:.5f} held {held_history[-1]:.5f}"
    print(f"[{epoch:>{width}}/{max_epochs:>{width}}] {losses}")
    stopper(held_history[-1], net)
    if stopper.should_stop:
        print("Early stop")
        break

net.load_state_dict(torch.load("best.pt"))
record.append(fit_history)
record.append(held_history)
record.append({k: v.detach().numpy().copy() for k, v in net.state_dict().items()})
"""

EARLY_STOPPING_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    (
        "        loss.backward()\n        opt.step()\n",
        "        grads = loss.backward()\n        opt.step(grads)\n",
    ),
]


def test_early_stopping_stops_and_restores_the_best_checkpoint_as_torch(
    capsys, monkeypatch, tmp_path
):
    """The epochs' average losses, the printed progress and stopper lines, and the weights
    restored from the best epoch's checkpoint agree with torch's; torch reads the checkpoint
    retrograd wrote as the same weights."""
    torch.manual_seed(0)
    initialize = initializer()
    records, logs = [], []
    for lib in (torch, rg):
        text = (
            EARLY_STOPPING_SOURCE
            if lib is torch
            else port(EARLY_STOPPING_SOURCE, EARLY_STOPPING_STEPS)
        )
        text = text.replace("from torch", "from retrograd") if lib is rg else text
        folder = tmp_path / lib.__name__
        folder.mkdir()
        monkeypatch.chdir(folder)
        np.random.seed(43201)
        random.seed(43201)
        record = []
        lib.set_default_dtype(lib.float64)
        try:
            with SharedDraws(lib, 43201):
                run_source(text, lib, record=record, initialize=initialize)
        finally:
            lib.set_default_dtype(lib.float32)
        records.append(record)
        logs.append(capsys.readouterr().out)
    theirs, ours = records
    assert "Early stop" in logs[0] and "no improvement for 2 of 2 epochs" in logs[0]
    assert len(theirs[0]) < 12  # (it stopped)
    progress = [
        [line for line in log.splitlines() if line.startswith(("[", "Validation", "no ", "Early"))]
        for log in logs
    ]
    assert progress[1] == progress[0]
    assert len(progress[0]) == 2 * len(theirs[0]) + 1
    assert_records_agree(ours, theirs, rtol=1e-9, atol=1e-11)
    written = torch.load(tmp_path / "retrograd" / "best.pt")
    assert list(written) == list(theirs[2])
    for name, value in written.items():
        assert isinstance(value, torch.Tensor)
        np.testing.assert_allclose(value.numpy(), theirs[2][name], rtol=1e-9, atol=1e-11)
