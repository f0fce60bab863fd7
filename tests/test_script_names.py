"""Names real PyTorch scripts call (``import retrograd as torch``), each checked against what
torch 2.13's CPU build answers for the same call."""

from __future__ import annotations

import pytest
import torch

import retrograd as rg
from retrograd.errors import InvalidArgumentError

NO_CUDA = not torch.cuda.is_available()

# -- rg.cuda without a device ----------------------------------------------------------------


@pytest.mark.skipif(not NO_CUDA, reason="torch's CPU-build answers are compared")
@pytest.mark.parametrize(
    "name, args",
    [
        ("manual_seed", (3,)),
        ("manual_seed_all", (3,)),
        ("seed", ()),
        ("seed_all", ()),
        ("empty_cache", ()),
        ("memory_allocated", ()),
        ("max_memory_allocated", ()),
        ("memory_reserved", ()),
        ("max_memory_reserved", ()),
        ("memory_allocated", (0,)),
    ],
)
def test_cuda_calls_answer_as_torch_cpu_build(name: str, args: tuple) -> None:
    expected = getattr(torch.cuda, name)(*args)
    assert getattr(rg.cuda, name)(*args) == expected
    assert expected in (None, 0)


@pytest.mark.skipif(not NO_CUDA, reason="torch's CPU-build answers are compared")
@pytest.mark.parametrize(
    "name", ["synchronize", "ipc_collect", "reset_peak_memory_stats", "initial_seed"]
)
def test_cuda_calls_needing_a_device_raise_as_torch_cpu_build(name: str) -> None:
    with pytest.raises((AssertionError, AttributeError, RuntimeError)):
        getattr(torch.cuda, name)()
    with pytest.raises(InvalidArgumentError, match=f"cuda.{name}: no CUDA device"):
        getattr(rg.cuda, name)()
