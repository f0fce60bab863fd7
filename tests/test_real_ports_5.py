# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):

- the TCN of locuslab/TCN (``TCN/tcn.py`` and the adding problem's ``model.py``/``utils.py``/
  ``add_test.py``): ``weight_norm`` convolutions (the deprecated ``torch.nn.utils`` one and
  ``torch.nn.utils.parametrizations``') initialized by ``self.conv1.weight.data.normal_(0,
  0.01)`` -- a write into the computed weight, which the next forward recomputes from ``g`` and
  ``v``, so it changes nothing, in torch --, a ``Chomp1d`` (``x[:, :, :-n].contiguous()``),
  dilated causal ``Conv1d`` blocks with a 1x1 downsample residual, ``torch.autograd.Variable``,
  element writes ``X_mask[i, 0, positions[0]] = 1`` and ``Y[i, 0] = ...`` of 0-d tensors,
  ``getattr(optim, args.optim)``, ``F.mse_loss``, ``clip_grad_norm_``.

The defect found: a write through ``.data`` into a tensor computed in the graph (not a leaf)
was refused; torch allows it (the values change, the tensor stays in its graph). The op table's
``data_write`` now does it: the new values, the gradient passing whole to the tensor written
into (``test_inplace.py`` checks it against torch).
"""

from __future__ import annotations

import types

import pytest
import torch

from real_ports import assert_records_agree, both

TCN_SOURCE = """
from torch.autograd import Variable
from torch.nn.utils import weight_norm

class Chomp1d(nn.Module):
    def __init__(self, chomp_size):
        super(Chomp1d, self).__init__()
        self.chomp_size = chomp_size

    def forward(self, x):
        return x[:, :, :-self.chomp_size].contiguous()

class TemporalBlock(nn.Module):
    def __init__(self, n_inputs, n_outputs, kernel_size, stride, dilation, padding, dropout=0.2):
        super(TemporalBlock, self).__init__()
        self.conv1 = weight_norm(nn.Conv1d(n_inputs, n_outputs, kernel_size,
                                           stride=stride, padding=padding, dilation=dilation))
        self.chomp1 = Chomp1d(padding)
        self.relu1 = nn.ReLU()
        self.dropout1 = nn.Dropout(dropout)

        self.conv2 = weight_norm(nn.Conv1d(n_outputs, n_outputs, kernel_size,
                                           stride=stride, padding=padding, dilation=dilation))
        self.chomp2 = Chomp1d(padding)
        self.relu2 = nn.ReLU()
        self.dropout2 = nn.Dropout(dropout)

        self.net = nn.Sequential(self.conv1, self.chomp1, self.relu1, self.dropout1,
                                 self.conv2, self.chomp2, self.relu2, self.dropout2)
        self.downsample = nn.Conv1d(n_inputs, n_outputs, 1) if n_inputs != n_outputs else None
        self.relu = nn.ReLU()
        self.init_weights()

    def init_weights(self):
        self.conv1.weight.data.normal_(0, 0.01)
        self.conv2.weight.data.normal_(0, 0.01)
        if self.downsample is not None:
            self.downsample.weight.data.normal_(0, 0.01)

    def forward(self, x):
        out = self.net(x)
        res = x if self.downsample is None else self.downsample(x)
        return self.relu(out + res)

class TemporalConvNet(nn.Module):
    def __init__(self, num_inputs, num_channels, kernel_size=2, dropout=0.2):
        super(TemporalConvNet, self).__init__()
        layers = []
        num_levels = len(num_channels)
        for i in range(num_levels):
            dilation_size = 2 ** i
            in_channels = num_inputs if i == 0 else num_channels[i-1]
            out_channels = num_channels[i]
            layers += [TemporalBlock(in_channels, out_channels, kernel_size, stride=1, dilation=dilation_size,
                                     padding=(kernel_size-1) * dilation_size, dropout=dropout)]

        self.network = nn.Sequential(*layers)

    def forward(self, x):
        return self.network(x)

class TCN(nn.Module):
    def __init__(self, input_size, output_size, num_channels, kernel_size, dropout):
        super(TCN, self).__init__()
        self.tcn = TemporalConvNet(input_size, num_channels, kernel_size=kernel_size, dropout=dropout)
        self.linear = nn.Linear(num_channels[-1], output_size)
        self.init_weights()

    def init_weights(self):
        self.linear.weight.data.normal_(0, 0.01)

    def forward(self, x):
        y1 = self.tcn(x)
        return self.linear(y1[:, :, -1])

def data_generator(N, seq_length, rng):
    X_num = torch.tensor(rng.random([N, 1, seq_length]), dtype=torch.float32)
    X_mask = torch.zeros([N, 1, seq_length])
    Y = torch.zeros([N, 1])
    for i in range(N):
        positions = rng.choice(seq_length, size=2, replace=False)
        X_mask[i, 0, positions[0]] = 1
        X_mask[i, 0, positions[1]] = 1
        Y[i,0] = X_num[i, 0, positions[0]] + X_num[i, 0, positions[1]]
    X = torch.cat((X_num, X_mask), dim=1)
    return Variable(X), Variable(Y)

def train(model, X_train, Y_train, optimizer, args):
    model.train()
    batch_idx = 1
    total_loss = 0
    records = []
    for i in range(0, X_train.size(0), args.batch_size):
        if i + args.batch_size > X_train.size(0):
            x, y = X_train[i:], Y_train[i:]
        else:
            x, y = X_train[i:(i+args.batch_size)], Y_train[i:(i+args.batch_size)]
        optimizer.zero_grad()
        output = model(x)
        loss = F.mse_loss(output, y)
        loss.backward()
        if args.clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        optimizer.step()
        batch_idx += 1
        total_loss += loss.item()
        records.append(loss.item())
        records.append({n: p.detach().numpy().copy() for n, p in model.named_parameters()})
    return records

def evaluate(model, X_test, Y_test):
    model.eval()
    with torch.no_grad():
        output = model(X_test)
        test_loss = F.mse_loss(output, Y_test)
        return test_loss.item()

def main(args, state=None):
    rng = np.random.default_rng(args.seed)
    X_train, Y_train = data_generator(20, args.seq_len, rng)
    X_test, Y_test = data_generator(8, args.seq_len, rng)
    channel_sizes = [args.nhid] * args.levels
    model = TCN(2, 1, channel_sizes, kernel_size=args.ksize, dropout=args.dropout)
    if state is not None:
        model.load_state_dict(state)
    init = {k: np.array(v.numpy() if hasattr(v, "numpy") else v, copy=True) for k, v in model.state_dict().items()}
    optimizer = getattr(optim, args.optim)(model.parameters(), lr=args.lr)
    records = []
    for ep in range(1, args.epochs + 1):
        records += train(model, X_train, Y_train, optimizer, args)
        records.append(evaluate(model, X_test, Y_test))
    return init, records
"""

TCN_STEP = [
    (
        "        loss.backward()\n        if args.clip > 0:\n            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)\n        optimizer.step()",
        "        grads = loss.backward()\n        if args.clip > 0:\n            torch.nn.utils.clip_grad_norm_(grads, model.parameters(), args.clip)\n        optimizer.step(grads)",
    )
]


@pytest.mark.filterwarnings("ignore:`torch.nn.utils.weight_norm` is deprecated")
@pytest.mark.parametrize("weight_norm", ["torch.nn.utils", "torch.nn.utils.parametrizations"])
def test_tcn_adding_problem_matches_torch(weight_norm):
    source = TCN_SOURCE.replace(
        "from torch.nn.utils import weight_norm", f"from {weight_norm} import weight_norm"
    )
    args = types.SimpleNamespace(
        seed=0, seq_len=12, nhid=6, levels=3, ksize=3, dropout=0.0, optim="Adam", lr=4e-3,
        clip=0.5, epochs=2, batch_size=8,
    )  # fmt: skip
    theirs, ours = both(source, TCN_STEP)
    torch.manual_seed(0)
    initial, expected = theirs["main"](args)
    keys = sorted(initial)
    assert ("tcn.network.0.conv1.weight_g" in keys) == (weight_norm == "torch.nn.utils")
    _, got = ours["main"](args, initial)
    assert_records_agree(got, expected, rtol=1e-4, atol=1e-5)
