"""Real ports, continued (the harness: ``tests/real_ports.py``): a program written here in
the style of the PyTorch recipe on automatic mixed precision, trained on the CPU under
``torch.autocast(device_type="cpu", dtype=torch.bfloat16, enabled=...)``: a ``Sequential`` of
``Linear``/``ReLU`` blocks built from a list, ``MSELoss``, SGD with ``zero_grad``, the forward
pass and loss inside the region and ``backward()`` outside it, the output's and the loss's
dtypes recorded by ``str(t.dtype)``.

Regressions guarded: on an inner backend with bfloat16 (torch's), retrograd autocasts as torch
does (the linear layers in bfloat16, the loss in float32) and trains bit for bit as torch's
autocast run; on NumPy (no bfloat16) the region warns and the ops compute in their inputs'
dtypes, as documented, so the port trains as torch's run with autocast off.

The lines changed: the gradient lines (``sgd.step(loss.backward())``).
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

AMP_SOURCE = """
width, outputs, depth = 24, 6, 3
inputs = [torch.randn(12, width, device="cpu") for _ in range(3)]
labels = [torch.randn(12, outputs, device="cpu") for _ in range(3)]

blocks = []
for _ in range(depth - 1):
    blocks += [torch.nn.Linear(width, width), torch.nn.ReLU()]
model = torch.nn.Sequential(*blocks, torch.nn.Linear(width, outputs))
initialize(model)
criterion = torch.nn.MSELoss()
sgd = torch.optim.SGD(model.parameters(), lr=0.02)

for epoch in range(2):
    for x, y in zip(inputs, labels):
        # only the forward pass is autocast: backward reuses the dtypes it chose
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16, enabled=use_amp):
            prediction = model(x)
            loss = criterion(prediction, y)
        loss.backward()
        sgd.step()
        sgd.zero_grad()
        record.append(loss.item())
        record.append(str(prediction.dtype).removeprefix("torch."))
        record.append(str(loss.dtype).removeprefix("torch."))
    record.append(params_of(model))
"""

AMP_STEPS = [("        loss.backward()\n        sgd.step()", "        sgd.step(loss.backward())")]


def _amp_runs(capsys, use_amp_in_torch):
    """The records of torch's run (autocast as ``use_amp_in_torch``) and of the port (autocast
    asked for), with the warnings the port gave."""
    torch_run, _ = runs_with_draws(
        AMP_SOURCE, AMP_STEPS, capsys, 25501, use_amp=use_amp_in_torch,
        initialize=initializer(), params_of=params_of,
    )  # fmt: skip
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        port_run, _ = runs_with_draws(
            AMP_SOURCE, AMP_STEPS, capsys, 25501, use_amp=True,
            initialize=initializer(), params_of=params_of,
        )  # fmt: skip
    return torch_run[0], port_run[1], caught


@pytest.mark.numpy_only("NumPy has no bfloat16: the documented full-precision fallback")
def test_amp_recipe_under_bfloat16_autocast_on_numpy_runs_in_full_precision(capsys, monkeypatch):
    # the region warns once a process per backend: an earlier test may have had it
    monkeypatch.setattr(sys.modules["retrograd.amp"], "_warned_no_dtype", set())
    theirs_full, ours, caught = _amp_runs(capsys, use_amp_in_torch=False)
    assert any("has no bfloat16" in str(w.message) for w in caught)
    assert_records_agree(ours, theirs_full, rtol=1e-5, atol=1e-6)
    assert ours[1] == ours[2] == "float32"


@pytest.mark.skipif(not backends.on_torch(), reason="NumPy has no bfloat16 to autocast to")
def test_amp_recipe_port_trains_as_torchs_bfloat16_autocast_run(capsys):
    theirs_bf16, ours, caught = _amp_runs(capsys, use_amp_in_torch=True)
    assert not [w for w in caught if "autocast" in str(w.message)]
    assert theirs_bf16[1] == ours[1] == "bfloat16"  # the linear layers autocast
    assert theirs_bf16[2] == ours[2] == "float32"  # the loss does not
    assert_records_agree(ours, theirs_bf16, rtol=0, atol=0)
