"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
the PyTorch recipe "Automatic Mixed Precision" (``recipes_source/recipes/amp_recipe.py``)
trained on the CPU under ``torch.autocast(device_type="cpu", dtype=torch.bfloat16)``, as its
text says for CPUs. Cut down: 32-wide, 3 layers, a few batches; the ``.cuda()`` calls dropped.

On an inner backend with bfloat16 (torch's), retrograd autocasts as torch does: the linear
layers compute in bfloat16, the loss in float32, and the port trains as torch's autocast run
(bit for bit). On NumPy (no bfloat16), the region warns and the ops compute in their inputs'
dtypes, as documented: the port then trains as torch's run with autocast off.

The lines changed: the gradient lines (``opt.step(loss.backward())``).
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


AMP_SOURCE = """
def make_model(in_size, out_size, num_layers):
    layers = []
    for _ in range(num_layers - 1):
        layers.append(torch.nn.Linear(in_size, in_size))
        layers.append(torch.nn.ReLU())
    layers.append(torch.nn.Linear(in_size, out_size))
    return torch.nn.Sequential(*tuple(layers))


batch_size = 16 # Try, for example, 128, 256, 513.
in_size = 32
out_size = 8
num_layers = 3
num_batches = 4
epochs = 2
device = 'cpu'

# Creates data in default precision.
# The same data is used for both default and mixed precision trials below.
# You don't need to manually change inputs' ``dtype`` when enabling mixed precision.
data = [torch.randn(batch_size, in_size, device=device) for _ in range(num_batches)]
targets = [torch.randn(batch_size, out_size, device=device) for _ in range(num_batches)]

loss_fn = torch.nn.MSELoss()

net = make_model(in_size, out_size, num_layers)
initialize(net)
opt = torch.optim.SGD(net.parameters(), lr=0.01)

for epoch in range(epochs):
    for input, target in zip(data, targets):
        # Runs the forward pass under ``autocast``.
        with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=use_amp):
            output = net(input)
            loss = loss_fn(output, target)

        # Exits ``autocast`` before backward().
        # Backward passes under ``autocast`` are not recommended.
        # Backward ops run in the same ``dtype`` ``autocast`` chose for corresponding forward ops.
        loss.backward()
        opt.step()
        opt.zero_grad() # set_to_none=True here can modify performance
        record.append(loss.item())
        record.append(str(output.dtype).removeprefix("torch."))
    record.append(params_of(net))
"""

AMP_STEPS = [("        loss.backward()\n        opt.step()", "        opt.step(loss.backward())")]


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
    assert ours[1] == "float32"


@pytest.mark.skipif(not backends.on_torch(), reason="NumPy has no bfloat16 to autocast to")
def test_amp_recipe_port_trains_as_torchs_bfloat16_autocast_run(capsys):
    theirs_bf16, ours, caught = _amp_runs(capsys, use_amp_in_torch=True)
    assert not [w for w in caught if "autocast" in str(w.message)]
    assert theirs_bf16[1] == ours[1] == "bfloat16"  # the linear layers autocast
    assert_records_agree(ours, theirs_bf16, rtol=0, atol=0)
