"""Focused regressions for the defects the ports of ``tests/test_real_ports_93.py`` and
``tests/test_real_ports_94.py`` revealed, each checked against torch."""

from __future__ import annotations

import copy

import pytest
import torch

import retrograd as rg


@pytest.mark.parametrize("lib", [torch, rg], ids=["torch", "retrograd"])
def test_module_containers_hold_none_as_a_placeholder(lib):
    # HRNet's _make_fuse_layers: ``fuse_layer.append(None)`` on the diagonal, so that
    # ``fuse_layers[i][j]`` is the layer from branch j; torch's add_module lets None in
    nn = lib.nn
    fuse_layer = [nn.Linear(2, 2), None, nn.Linear(2, 2)]
    layers = nn.ModuleList(fuse_layer)
    assert len(layers) == 3 and layers[1] is None
    assert list(layers.state_dict()) == ["0.weight", "0.bias", "2.weight", "2.bias"]
    assert [name for name, _ in layers.named_children()] == ["0", "2"]
    layers.append(None)
    layers.insert(0, None)
    layers.extend([None])
    layers[1] = None
    assert [m is None for m in layers] == [True, True, True, False, True, True]
    assert copy.deepcopy(layers)[0] is None
    assert "(0): None" in repr(nn.Sequential(None, nn.ReLU()))
    assert nn.ModuleDict({"skip": None})["skip"] is None
    # anything else is still refused
    error = TypeError if lib is torch else rg.DTypeError
    with pytest.raises(error, match="Module"):
        nn.ModuleList([nn.ReLU(), 3])
    with pytest.raises(error, match="Module"):
        layers.append("relu")
