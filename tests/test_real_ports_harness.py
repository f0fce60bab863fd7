"""The real-port harness itself (tests/real_ports.py): a port that still imports torch's own
modules runs on torch and would agree with torch trivially, so the harness refuses it."""

from __future__ import annotations

import pytest
import torch

import retrograd as rg
from real_ports import run_source

SOURCE = "{imports}\nrecord.append(float(nn.functional.relu(torch.tensor([-1.0, 2.0])).sum()))\n"


@pytest.mark.parametrize(
    "imports",
    ["import torch", "import torch\nimport torch.nn as nn", "import torch\nfrom torch import nn"],
)
def test_a_port_that_still_imports_torch_is_refused(imports):
    with pytest.raises(AssertionError, match="binds PyTorch's own names"):
        run_source(SOURCE.format(imports=imports), rg, record=[])


def test_the_same_program_ported_and_the_torch_run_are_accepted():
    theirs, ours = [], []
    run_source(SOURCE.format(imports="import torch"), torch, record=theirs)
    run_source(SOURCE.format(imports="import retrograd as torch"), rg, record=ours)
    assert ours == theirs == [2.0]
