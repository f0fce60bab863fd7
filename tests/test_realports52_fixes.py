"""Regression tests for the defects found while porting the reinforcement-learning programs of
``tests/test_real_ports_380.py`` .. ``_385.py``, each against PyTorch."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

import retrograd as rg


def trained_with_a_kept_state_dict(lib):
    """A layer and a batch norm, their ``state_dict()`` taken before one SGD step and one
    training forward (which moves the running statistics and ``num_batches_tracked``)."""
    lib.manual_seed(0)
    model = lib.nn.Sequential(lib.nn.Linear(2, 3), lib.nn.BatchNorm1d(3))
    with lib.no_grad():
        model[0].weight.copy_(lib.tensor([[0.5, -1.0], [0.25, 2.0], [-0.75, 1.5]]))
        model[0].bias.copy_(lib.tensor([0.1, -0.2, 0.3]))
    kept = model.state_dict()
    optimizer = lib.optim.SGD(model.parameters(), lr=0.1)
    x = lib.tensor([[1.0, 2.0], [3.0, -1.0], [0.5, 0.5]])
    hidden = model[0](x)
    model[1](hidden.detach())  # a training forward of the batch norm alone
    loss = (hidden**2).mean()
    if lib is torch:
        loss.backward()
        optimizer.step()
    else:
        optimizer.step(loss.backward())
    return kept


READS = {
    "sum": lambda v: v.sum(),
    "mean": lambda v: v.mean(),
    "max": lambda v: v.max(),
    "copy": lambda v: v.clone() if isinstance(v, torch.Tensor) else v.copy(),
    "astype": lambda v: v.double() if isinstance(v, torch.Tensor) else v.astype(np.float64),
    "flatten": lambda v: v.flatten(),
    "reshape": lambda v: v.reshape(-1),
    "iterate": lambda v: [float(x) for x in v.reshape(-1)],
    "tensor": lambda v: v.clone() if isinstance(v, torch.Tensor) else rg.tensor(v).numpy(),
    "as_tensor": lambda v: v if isinstance(v, torch.Tensor) else rg.as_tensor(v).numpy(),
    "from_numpy": lambda v: v if isinstance(v, torch.Tensor) else rg.from_numpy(v).numpy(),
    "print": lambda v: [float(x) for x in re.findall(r"-?\d+\.\d*(?:e[-+]?\d+)?", str(v))],
}  # fmt: skip


@pytest.mark.parametrize("read", list(READS))
@pytest.mark.parametrize("name", ["0.weight", "0.bias", "1.running_mean", "1.running_var"])
def test_state_dict_value_kept_across_a_step_reads_the_current_numbers(read, name):
    # torch's state-dict tensors are the module's storage: read after the step, they give the
    # new numbers. NumPy's methods on a kept StateValue read the snapshot of state_dict()'s
    # call (v.copy(), v.astype(...), list(v), float(v)), and so did rg.tensor(v)
    theirs = READS[read](trained_with_a_kept_state_dict(torch)[name])
    ours = READS[read](trained_with_a_kept_state_dict(rg)[name])
    expected = np.asarray(theirs.detach().numpy() if hasattr(theirs, "detach") else theirs)
    np.testing.assert_allclose(np.asarray(ours, dtype=np.float64), expected, rtol=1e-4, atol=1e-4)


def test_state_dict_scalar_buffer_kept_across_a_step_converts_to_the_current_number():
    theirs = trained_with_a_kept_state_dict(torch)["1.num_batches_tracked"]
    ours = trained_with_a_kept_state_dict(rg)["1.num_batches_tracked"]
    assert int(ours) == int(theirs) == 1
    assert float(ours) == float(theirs) == 1.0
    assert bool(ours) is bool(theirs) is True
    assert f"{ours:d}" == f"{int(theirs):d}" == "1"
    assert list(range(10))[ours] == 1  # __index__
