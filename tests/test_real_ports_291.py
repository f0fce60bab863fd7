"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
the MNIST example's network (``pytorch/examples``, ``mnist/main.py``) trained by the training
loop of torch's AMP docs written device-agnostically (``docs/source/amp.rst``, "Typical Mixed
Precision Training" with the CPU's bfloat16 of "CPU Training Example"): float16 with a
``GradScaler`` on CUDA, bfloat16 and a disabled scaler on the CPU. Cut down: 12x12 images,
8 and 16 channels, a 32-wide hidden layer, a few batches of random data; the dropout layers
left out (their masks would be drawn from two streams).

On an inner backend with bfloat16 (torch's) retrograd autocasts as torch does: the
convolutions and linear layers compute in bfloat16, ``log_softmax`` in its input's dtype,
``nll_loss`` in float32, and the parameters stay float32 with float32 gradients; the port
trains as torch's autocast run, bit for bit. On NumPy (no bfloat16) it runs in full precision, as
documented, and follows torch's run with autocast off.

The lines changed: the gradient lines (``scaler.step(optimizer, scaler.scale(loss).backward())``).
"""

from __future__ import annotations

import random
import sys
import warnings

import numpy as np
import pytest
import torch

import backends
import retrograd as rg
from real_ports import assert_records_agree, initializer, params_of, runs_with_draws


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    rg.seed(0)


MNIST_AMP_SOURCE = """
class Net(nn.Module):
    def __init__(self):
        super(Net, self).__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, 1)
        self.conv2 = nn.Conv2d(8, 16, 3, 1)
        self.fc1 = nn.Linear(256, 32)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, x):
        x = self.conv1(x)
        x = F.relu(x)
        x = self.conv2(x)
        x = F.relu(x)
        x = F.max_pool2d(x, 2)
        x = torch.flatten(x, 1)
        x = self.fc1(x)
        x = F.relu(x)
        x = self.fc2(x)
        output = F.log_softmax(x, dim=1)
        return output


use_cuda = torch.cuda.is_available() and use_amp
device = torch.device("cuda" if use_cuda else "cpu")
amp_dtype = torch.float16 if use_cuda else torch.bfloat16

batches = [(torch.randn(8, 1, 12, 12), torch.randint(0, 10, (8,))) for _ in range(4)]

model = Net().to(device)
initialize(model)
optimizer = optim.Adadelta(model.parameters(), lr=1.0)
scaler = torch.amp.GradScaler(device.type, enabled=use_cuda)

for epoch in range(2):
    model.train()
    for batch_idx, (data, target) in enumerate(batches):
        data, target = data.to(device), target.to(device)
        optimizer.zero_grad()
        with torch.autocast(device_type=device.type, dtype=amp_dtype, enabled=use_amp):
            output = model(data)
            loss = F.nll_loss(output, target)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        record.append(loss.item())
        record.append(str(output.dtype).removeprefix("torch."))
    record.append(params_of(model))
"""

MNIST_AMP_STEPS = [
    (
        "        scaler.scale(loss).backward()\n        scaler.step(optimizer)",
        "        scaler.step(optimizer, scaler.scale(loss).backward())",
    )
]


def _runs(capsys, use_amp_in_torch):
    """The records of torch's run (autocast as ``use_amp_in_torch``) and of the port
    (autocast asked for), with the warnings the port gave."""
    torch_run, _ = runs_with_draws(
        MNIST_AMP_SOURCE, MNIST_AMP_STEPS, capsys, 29101, use_amp=use_amp_in_torch,
        initialize=initializer(), params_of=params_of,
    )  # fmt: skip
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        port_run, _ = runs_with_draws(
            MNIST_AMP_SOURCE, MNIST_AMP_STEPS, capsys, 29101, use_amp=True,
            initialize=initializer(), params_of=params_of,
        )  # fmt: skip
    return torch_run[0], port_run[1], caught


@pytest.mark.skipif(not backends.on_torch(), reason="NumPy has no bfloat16 to autocast to")
def test_mnist_amp_loop_trains_as_torchs_bfloat16_autocast_run(capsys):
    theirs, ours, caught = _runs(capsys, use_amp_in_torch=True)
    assert not [w for w in caught if "autocast" in str(w.message)]
    assert theirs[1] == ours[1] == "bfloat16"  # log_softmax of fc2's bfloat16 output
    assert_records_agree(ours, theirs, rtol=0, atol=0)  # bit for bit


@pytest.mark.numpy_only("NumPy has no bfloat16: the documented full-precision fallback")
def test_mnist_amp_loop_on_numpy_runs_in_full_precision(capsys, monkeypatch):
    monkeypatch.setattr(sys.modules["retrograd.amp"], "_warned_no_dtype", set())
    theirs, ours, caught = _runs(capsys, use_amp_in_torch=False)
    assert any("has no bfloat16" in str(w.message) for w in caught)
    assert ours[1] == "float32"
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)
