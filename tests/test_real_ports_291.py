"""Real ports, continued (the harness: ``tests/real_ports.py``): a program written here in the
style of pytorch/examples' MNIST convnet trained by the mixed-precision loop of torch's AMP
documentation, written device-agnostically: float16 with a ``GradScaler`` on CUDA, bfloat16
and a disabled scaler on the CPU (``torch.amp.GradScaler(device.type, enabled=...)``,
``torch.autocast(device_type=, dtype=, enabled=)``, ``scaler.scale(loss).backward()``,
``scaler.step``, ``scaler.update``), Adadelta, 10x10 random images; no dropout layers (their
masks would be drawn from two streams).

On an inner backend with bfloat16 (torch's) retrograd autocasts as torch does: the
convolutions and linear layers compute in bfloat16, ``log_softmax`` in its input's dtype,
``nll_loss`` in float32, and the parameters stay float32 with float32 gradients; the port
trains as torch's autocast run, bit for bit. On NumPy (no bfloat16) it runs in full precision, as
documented, and follows torch's run with autocast off.

The lines changed: the gradient lines (``scaler.step(optimizer, scaler.scale(loss).backward())``).
"""

from __future__ import annotations

import sys
import warnings

import pytest

import backends
from real_ports import (
    assert_records_agree,
    initializer,
    params_of,
    runs_with_draws,
    seeded_draws,  # noqa: F401 (autouse: each test from fixed seeds)
)

MNIST_AMP_SOURCE = """
class DigitConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(1, 6, 3, 1)
        self.deeper = nn.Conv2d(6, 12, 3, 1)
        self.hidden = nn.Linear(48, 24)
        self.logits = nn.Linear(24, 10)

    def forward(self, img):
        h = F.max_pool2d(F.relu(self.stem(img)), 2)
        h = torch.flatten(F.relu(self.deeper(h)), 1)
        return F.log_softmax(self.logits(F.relu(self.hidden(h))), dim=1)


# float16 with loss scaling on a GPU; bfloat16 (no scaling needed) on the CPU
on_gpu = use_amp and torch.cuda.is_available()
device = torch.device("cuda" if on_gpu else "cpu")
half = torch.float16 if on_gpu else torch.bfloat16

net = DigitConvNet().to(device)
initialize(net)
optimizer = optim.Adadelta(net.parameters(), lr=1.0)
scaler = torch.amp.GradScaler(device.type, enabled=on_gpu)
loader = [(torch.randn(6, 1, 10, 10), torch.randint(0, 10, (6,))) for _ in range(3)]

for epoch in range(2):
    net.train()
    for images, labels in loader:
        images, labels = images.to(device), labels.to(device)
        optimizer.zero_grad()
        with torch.autocast(device_type=device.type, dtype=half, enabled=use_amp):
            logp = net(images)
            loss = F.nll_loss(logp, labels)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        record.append(loss.item())
        record.append(str(logp.dtype).removeprefix("torch."))
    record.append(params_of(net))
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
