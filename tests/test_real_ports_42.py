"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):

- time sequence prediction as pytorch/examples writes it (``time_sequence_prediction/
  generate_sine_wave.py`` and ``train.py``), on fewer and shorter waves: the data made in NumPy
  (``np.empty((N, L), 'int64')``, ``x[:] = np.array(range(L)) + np.random.randint(...)``),
  saved by ``torch.save(data, open('traindata.pt', 'wb'))`` (a NumPy array) and read by
  ``torch.load`` into ``torch.from_numpy(data[3:, :-1])``; two ``nn.LSTMCell(..., 51)`` over
  ``input.split(1, dim=1)`` from ``torch.zeros(input.size(0), 51, dtype=torch.double)`` states,
  ``outputs += [output]``, the free-running ``future`` loop feeding back its output,
  ``torch.cat(outputs, dim=1)``; ``seq.double()``; ``optim.LBFGS(seq.parameters(), lr=0.8)``
  stepped with a closure printing ``'loss:', loss.item()``; the test prediction under
  ``torch.no_grad()`` with ``pred[:, :-future]`` and ``pred.detach().numpy()``.

The lines changed: the closure's gradient lines (``grads = loss.backward()``, ``return loss,
grads``), and ``torch.load(..., weights_only=False)`` (a pickled NumPy array: torch 2.6+
refuses it under its default, as retrograd does).
"""

from __future__ import annotations

import types

import torch

import retrograd as rg
from real_ports import assert_records_agree, port, run_source

SINE_SOURCE = """
# generate_sine_wave.py
np.random.seed(2)

T = 20
L = 30
N = 8
x = np.empty((N, L), 'int64')
x[:] = np.array(range(L)) + np.random.randint(-4 * T, 4 * T, N).reshape(N, 1)
data = np.sin(x / 1.0 / T).astype('float64')
torch.save(data, open(opt.dir + 'traindata.pt', 'wb'))


# train.py
class Sequence(nn.Module):
    def __init__(self):
        super(Sequence, self).__init__()
        self.lstm1 = nn.LSTMCell(1, 51)
        self.lstm2 = nn.LSTMCell(51, 51)
        self.linear = nn.Linear(51, 1)

    def forward(self, input, future = 0):
        outputs = []
        h_t = torch.zeros(input.size(0), 51, dtype=torch.double)
        c_t = torch.zeros(input.size(0), 51, dtype=torch.double)
        h_t2 = torch.zeros(input.size(0), 51, dtype=torch.double)
        c_t2 = torch.zeros(input.size(0), 51, dtype=torch.double)

        for input_t in input.split(1, dim=1):
            h_t, c_t = self.lstm1(input_t, (h_t, c_t))
            h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
            output = self.linear(h_t2)
            outputs += [output]
        for i in range(future):# if we should predict the future
            h_t, c_t = self.lstm1(output, (h_t, c_t))
            h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
            output = self.linear(h_t2)
            outputs += [output]
        outputs = torch.cat(outputs, dim=1)
        return outputs


# set random seed to 0
np.random.seed(0)
torch.manual_seed(0)
# load data and make training set
data = torch.load(opt.dir + 'traindata.pt', weights_only=False)
input = torch.from_numpy(data[3:, :-1])
target = torch.from_numpy(data[3:, 1:])
test_input = torch.from_numpy(data[:3, :-1])
test_target = torch.from_numpy(data[:3, 1:])
# build the model
seq = Sequence()
seq.double()
initialize(seq)  # the test's: the same weights in both runs
criterion = nn.MSELoss()
# use LBFGS as optimizer since we can load the whole data to train
optimizer = optim.LBFGS(seq.parameters(), lr=0.8)
#begin to train
for i in range(opt.steps):
    print('STEP: ', i)
    def closure():
        optimizer.zero_grad()
        out = seq(input)
        loss = criterion(out, target)
        print('loss:', loss.item())
        loss.backward()
        return loss
    optimizer.step(closure)
    # begin to predict, no need to track gradient here
    with torch.no_grad():
        future = 10
        pred = seq(test_input, future=future)
        loss = criterion(pred[:, :-future], test_target)
        print('test loss:', loss.item())
        y = pred.detach().numpy()
"""

SINE_STEP = [
    (
        "        loss.backward()\n        return loss",
        "        grads = loss.backward()\n        return loss, grads",
    )
]


def test_time_sequence_prediction_matches_torch(tmp_path, capsys):
    state, runs = {}, []
    for lib in (torch, rg):

        def initialize(seq):
            if not state:
                state.update({k: v.detach().numpy().copy() for k, v in seq.state_dict().items()})
            else:
                seq.load_state_dict({k: rg.tensor(v) for k, v in state.items()})

        opt = types.SimpleNamespace(dir=str(tmp_path / f"{lib.__name__}_"), steps=2)
        source = SINE_SOURCE if lib is torch else port(SINE_SOURCE, SINE_STEP)
        names = run_source(source, lib, opt=opt, initialize=initialize)
        params = {n: p.detach().numpy().copy() for n, p in names["seq"].named_parameters()}
        runs.append((names, capsys.readouterr().out, params))
    (theirs, their_log, their_params), (ours, our_log, our_params) = runs
    their_losses = [float(line.split()[-1]) for line in their_log.splitlines() if "loss:" in line]
    our_losses = [float(line.split()[-1]) for line in our_log.splitlines() if "loss:" in line]
    assert len(their_losses) > 10 and len(our_losses) == len(their_losses)
    assert their_losses[-1] < their_losses[0]
    assert_records_agree(
        [our_losses, ours["y"], our_params],
        [their_losses, theirs["y"], their_params],
        rtol=1e-7,
        atol=1e-9,
    )
    assert ours["y"].shape == (3, 29 + 10)
