"""Real ports, continued (the harness: ``tests/real_ports.py``): a program written here in the
style of locuslab/TCN (the temporal convolutional network and its adding-problem experiment),
run under torch and, ported, under retrograd from the same weights.

Its surface: ``weight_norm`` convolutions (the deprecated ``torch.nn.utils`` one and
``torch.nn.utils.parametrizations``') initialized by ``conv.weight.data.normal_(0, 0.01)`` -- a
write into the computed weight, which the next forward recomputes from ``g`` and ``v``, so it
changes nothing, in torch --, a trimming module (``x[:, :, :-n].contiguous()``) that makes
padded ``Conv1d``s causal, dilated residual blocks with a 1x1 ``Conv1d`` when the widths differ,
``torch.autograd.Variable``, element writes ``marks[i, 0, where[0]] = 1`` and ``y[i, 0] = ...``
of 0-d tensors, ``getattr(optim, name)``, ``F.mse_loss``, ``clip_grad_norm_`` and a
``no_grad`` evaluation.

The regression guarded: a write through ``.data`` into a tensor computed in the graph (not a
leaf) was refused; torch allows it (the values change, the tensor stays in its graph). The op
table's ``data_write`` now does it: the new values, the gradient passing whole to the tensor
written into (``test_inplace.py`` checks it against torch).
"""

from __future__ import annotations

import types

import pytest
import torch

from real_ports import assert_records_agree, both

TCN_SOURCE = """
from torch import autograd
from torch.nn.utils import weight_norm as wn

class Trim(nn.Module):
    # drops the right padding a causal convolution added, so no step sees its future
    def __init__(self, n):
        super().__init__()
        self.n = n

    def forward(self, x):
        return x[:, :, :-self.n].contiguous()

def causal_conv(c_in, c_out, k, dilation):
    pad = (k - 1) * dilation
    conv = wn(nn.Conv1d(c_in, c_out, k, stride=1, padding=pad, dilation=dilation))
    return conv, Trim(pad)

class ResidualBlock(nn.Module):
    def __init__(self, c_in, c_out, k, dilation, dropout):
        super().__init__()
        self.first, trim_a = causal_conv(c_in, c_out, k, dilation)
        self.second, trim_b = causal_conv(c_out, c_out, k, dilation)
        self.path = nn.Sequential(
            self.first, trim_a, nn.ReLU(), nn.Dropout(dropout),
            self.second, trim_b, nn.ReLU(), nn.Dropout(dropout),
        )
        self.skip = nn.Conv1d(c_in, c_out, 1) if c_in != c_out else None
        # a write into the weight weight_norm computes: the next forward recomputes it
        for conv in (self.first, self.second, self.skip):
            if conv is not None:
                conv.weight.data.normal_(0, 0.01)

    def forward(self, x):
        shortcut = x if self.skip is None else self.skip(x)
        return F.relu(self.path(x) + shortcut)

class SequenceRegressor(nn.Module):
    def __init__(self, n_in, widths, k=2, dropout=0.2):
        super().__init__()
        ins = [n_in] + widths[:-1]
        self.blocks = nn.Sequential(*[
            ResidualBlock(c_in, c_out, k, 2 ** level, dropout)
            for level, (c_in, c_out) in enumerate(zip(ins, widths))
        ])
        self.readout = nn.Linear(widths[-1], 1)
        self.readout.weight.data.normal_(0, 0.01)

    def forward(self, x):
        return self.readout(self.blocks(x)[:, :, -1])  # the last step has seen everything

def adding_task(n, length, rng):
    # channel 0: random values; channel 1: two marks; target: the sum of the marked values
    values = torch.tensor(rng.random([n, 1, length]), dtype=torch.float32)
    marks = torch.zeros([n, 1, length])
    y = torch.zeros([n, 1])
    for i in range(n):
        where = rng.choice(length, size=2, replace=False)
        marks[i, 0, where[0]] = 1
        marks[i, 0, where[1]] = 1
        y[i, 0] = values[i, 0, where[0]] + values[i, 0, where[1]]
    return autograd.Variable(torch.cat((values, marks), dim=1)), autograd.Variable(y)

def main(cfg, state=None):
    rng = np.random.default_rng(cfg.seed)
    x_train, y_train = adding_task(12, cfg.length, rng)
    x_test, y_test = adding_task(6, cfg.length, rng)
    model = SequenceRegressor(2, [cfg.width] * cfg.levels, k=cfg.k, dropout=cfg.dropout)
    if state is not None:
        model.load_state_dict(state)
    start = {k: v.numpy().copy() for k, v in model.state_dict().items()}
    opt = getattr(optim, cfg.optim)(model.parameters(), lr=cfg.lr)
    log = []
    for _ in range(cfg.epochs):
        model.train()
        for lo in range(0, x_train.size(0), cfg.batch):
            x, y = x_train[lo:lo + cfg.batch], y_train[lo:lo + cfg.batch]  # the last one short
            opt.zero_grad()
            loss = F.mse_loss(model(x), y)
            loss.backward()
            if cfg.clip > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip)
            opt.step()
            log.append(loss.item())
            log.append({n: p.detach().numpy().copy() for n, p in model.named_parameters()})
        model.eval()
        with torch.no_grad():
            log.append(F.mse_loss(model(x_test), y_test).item())
    return start, log
"""

TCN_STEP = [
    (
        "            loss.backward()\n            if cfg.clip > 0:\n"
        "                torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip)\n"
        "            opt.step()",
        "            grads = loss.backward()\n            if cfg.clip > 0:\n"
        "                torch.nn.utils.clip_grad_norm_(grads, model.parameters(), cfg.clip)\n"
        "            opt.step(grads)",
    )
]


@pytest.mark.filterwarnings("ignore:`torch.nn.utils.weight_norm` is deprecated")
@pytest.mark.parametrize("weight_norm", ["torch.nn.utils", "torch.nn.utils.parametrizations"])
def test_temporal_conv_net_on_the_adding_task_matches_torch(weight_norm):
    source = TCN_SOURCE.replace(
        "from torch.nn.utils import weight_norm as wn",
        f"from {weight_norm} import weight_norm as wn",
    )
    cfg = types.SimpleNamespace(
        seed=0, length=10, width=5, levels=2, k=3, dropout=0.0, optim="Adam", lr=4e-3,
        clip=0.5, epochs=2, batch=5,
    )  # fmt: skip
    theirs, ours = both(source, TCN_STEP)
    torch.manual_seed(0)
    initial, expected = theirs["main"](cfg)
    keys = sorted(initial)
    assert ("blocks.0.first.weight_g" in keys) == (weight_norm == "torch.nn.utils")
    _, got = ours["main"](cfg, initial)
    assert_records_agree(got, expected, rtol=1e-4, atol=1e-5)
