"""A program written here in the style of pytorch/examples' time sequence prediction, run under
torch and, ported, under retrograd from the same weights (the harness: ``tests/real_ports.py``):

- shifted sine waves made in NumPy (``np.empty((N, L), "int64")``, ``x[:] = np.array(range(L))
  + np.random.randint(...).reshape(N, 1)``), saved by ``torch.save(array, open(path, "wb"))``
  and read back by ``torch.load(..., weights_only=False)`` (a pickled NumPy array: torch 2.6+
  refuses it under its default, as retrograd does) into ``torch.from_numpy`` of slices;
  two stacked ``nn.LSTMCell`` unrolled over ``input.split(1, dim=1)`` from
  ``torch.zeros(batch, hidden, dtype=torch.double)`` states, ``outputs += [output]``, a
  free-running ``future`` loop feeding back its own output, ``torch.cat(outputs, dim=1)``;
  ``model.double()``; ``optim.LBFGS(model.parameters(), lr=0.8)`` stepped with a closure that
  prints ``loss.item()``; a forecast under ``torch.no_grad()`` scored on ``pred[:, :-future]``
  and taken out by ``pred.detach().numpy()``.

The port changes only the closure's gradient lines (``grads = loss.backward()``, ``return
loss, grads``).
"""

from __future__ import annotations

import types

import pytest
import torch

import retrograd as rg
from real_ports import (
    assert_records_agree,
    global_streams_restored,  # noqa: F401 (a fixture: the program seeds NumPy and torch)
    port,
    run_source,
)

WAVES_SOURCE = """
HIDDEN = 8


def make_waves(path, count=5, length=13, period=3.0):
    # each row is one wave, started at its own random phase
    np.random.seed(5)
    steps = np.empty((count, length), "int64")
    steps[:] = np.array(range(length)) + np.random.randint(-20, 20, count).reshape(count, 1)
    waves = np.sin(steps / period).astype("float64")
    torch.save(waves, open(path, "wb"))


class Forecaster(nn.Module):
    def __init__(self, hidden=HIDDEN):
        super().__init__()
        self.hidden = hidden
        self.lower = nn.LSTMCell(1, hidden)
        self.upper = nn.LSTMCell(hidden, hidden)
        self.readout = nn.Linear(hidden, 1)

    def blank(self, batch):
        return torch.zeros(batch, self.hidden, dtype=torch.double)

    def advance(self, value, states):
        (h1, c1), (h2, c2) = states
        h1, c1 = self.lower(value, (h1, c1))
        h2, c2 = self.upper(h1, (h2, c2))
        return self.readout(h2), ((h1, c1), (h2, c2))

    def forward(self, series, future=0):
        batch = series.size(0)
        states = ((self.blank(batch), self.blank(batch)), (self.blank(batch), self.blank(batch)))
        outputs = []
        for column in series.split(1, dim=1):
            output, states = self.advance(column, states)
            outputs += [output]
        for _ in range(future):  # keep going on our own guesses
            output, states = self.advance(output, states)
            outputs += [output]
        return torch.cat(outputs, dim=1)


make_waves(opt.dir + "waves.pt")
torch.manual_seed(0)
waves = torch.load(opt.dir + "waves.pt", weights_only=False)
train_in, train_out = torch.from_numpy(waves[2:, :-1]), torch.from_numpy(waves[2:, 1:])
held_in, held_out = torch.from_numpy(waves[:2, :-1]), torch.from_numpy(waves[:2, 1:])

model = Forecaster()
model.double()
initialize(model)  # the test's: the same weights in both runs
mse = nn.MSELoss()
lbfgs = optim.LBFGS(model.parameters(), lr=0.8)

for epoch in range(opt.epochs):
    def closure():
        lbfgs.zero_grad()
        loss = mse(model(train_in), train_out)
        print("train loss:", loss.item())
        loss.backward()
        return loss

    lbfgs.step(closure)
    with torch.no_grad():
        ahead = 4
        pred = model(held_in, future=ahead)
        print("held-out loss:", mse(pred[:, :-ahead], held_out).item())
        forecast = pred.detach().numpy()
"""

WAVES_STEP = [
    (
        "        loss.backward()\n        return loss",
        "        grads = loss.backward()\n        return loss, grads",
    )
]


@pytest.mark.usefixtures("global_streams_restored")
def test_time_sequence_prediction_matches_torch(tmp_path, capsys):
    weights, runs = {}, []
    for lib in (torch, rg):

        def initialize(model):
            if not weights:
                weights.update(
                    {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
                )
            else:
                model.load_state_dict({k: rg.tensor(v) for k, v in weights.items()})

        opt = types.SimpleNamespace(dir=str(tmp_path / f"{lib.__name__}_"), epochs=2)
        source = WAVES_SOURCE if lib is torch else port(WAVES_SOURCE, WAVES_STEP)
        names = run_source(source, lib, opt=opt, initialize=initialize)
        params = {n: p.detach().numpy().copy() for n, p in names["model"].named_parameters()}
        runs.append((names, capsys.readouterr().out, params))
    (theirs, their_log, their_params), (ours, our_log, our_params) = runs

    def losses(log):
        return [float(line.split()[-1]) for line in log.splitlines() if "train loss:" in line]

    their_losses, our_losses = losses(their_log), losses(our_log)
    assert len(their_losses) > 10 and len(our_losses) == len(their_losses)
    assert their_losses[-1] < their_losses[0]
    assert our_log.count("held-out loss:") == 2
    assert_records_agree(
        [our_losses, ours["forecast"], our_params],
        [their_losses, theirs["forecast"], their_params],
        rtol=1e-7,
        atol=1e-9,
    )
    assert ours["forecast"].shape == (2, 12 + 4)
