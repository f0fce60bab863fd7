"""Defects found by the real ports of round 67 (``tests/test_real_ports_67b.py``, ``_67c.py``,
``_67d.py``), each checked against torch on its own."""

from __future__ import annotations

import pytest
import torch

import retrograd as rg


@pytest.mark.parametrize("lib", [torch, rg], ids=["torch", "retrograd"])
def test_a_slice_of_a_sequential_subclass_is_of_the_subclass(lib):
    """CROWN-IBP-style code bounds a prefix of its ``BoundSequential`` by ``model[:-1]`` and
    calls the subclass's own method on it; retrograd's slice was a plain ``Sequential``."""

    class Bounded(lib.nn.Sequential):
        def widths(self, upper, lower):
            return [m.out_features for m in self if isinstance(m, lib.nn.Linear)]

    model = Bounded(lib.nn.Linear(3, 4), lib.nn.ReLU(), lib.nn.Linear(4, 2))
    prefix = model[:-1]
    assert type(prefix) is Bounded
    assert list(prefix._modules) == ["0", "1"] and prefix[0] is model[0]
    assert prefix.widths(None, None) == [4]


@pytest.mark.parametrize("lib", [torch, rg], ids=["torch", "retrograd"])
def test_a_slice_of_a_module_list_subclass_is_of_the_subclass(lib):
    class Stages(lib.nn.ModuleList):
        def total(self):
            return sum(m.out_features for m in self)

    stages = Stages([lib.nn.Linear(2, 3), lib.nn.Linear(3, 5), lib.nn.Linear(5, 1)])
    tail = stages[1:]
    assert type(tail) is Stages and tail.total() == 6 and tail[0] is stages[1]
