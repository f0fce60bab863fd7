"""Defects that the real-port programs written here in round ownports4 exposed, each checked
against torch."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from torch.nn.utils.weight_norm import WeightNorm as TorchWeightNorm

import retrograd as rg
from retrograd.nn.utils.weight_norm import WeightNorm as RgWeightNorm


def test_remove_weight_norm_undoes_the_hook_class_applied_directly():
    # ``remove_weight_norm`` after ``WeightNorm.apply(layer, 'weight', dim=0)`` raised
    # "weight_norm of 'weight' not found" (the class and the function kept separate records)
    rng = np.random.default_rng(4001)
    weight = rng.standard_normal((3, 4)).astype(np.float32)
    gain = rng.uniform(0.5, 2.0, (3, 1)).astype(np.float32)
    x = rng.standard_normal((2, 4)).astype(np.float32)
    results = []
    for lib, hook in ((torch, TorchWeightNorm), (rg, RgWeightNorm)):
        layer = lib.nn.Linear(4, 3, bias=False)
        layer.load_state_dict({"weight": lib.tensor(weight)})
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            hook.apply(layer, "weight", dim=0)
        assert any(isinstance(h, hook) for h in layer._forward_pre_hooks.values())
        with lib.no_grad():
            layer.weight_g.copy_(lib.tensor(gain))
        before = layer(lib.tensor(x)).detach().numpy().copy()
        lib.nn.utils.remove_weight_norm(layer)
        assert [name for name, _ in layer.named_parameters()] == ["weight"]
        assert len(layer._forward_pre_hooks) == 0
        after = layer(lib.tensor(x)).detach().numpy().copy()
        np.testing.assert_allclose(after, before, rtol=1e-6)
        results.append((after, layer.weight.detach().numpy().copy()))
    for mine, reference in zip(results[1], results[0]):
        np.testing.assert_allclose(mine, reference, rtol=1e-5, atol=1e-6)


def test_weight_norm_function_and_hook_class_do_not_stack():
    layer = rg.nn.utils.weight_norm(rg.nn.Linear(3, 2))
    refused = pytest.raises(rg.InvalidArgumentError, match="Cannot register two weight_norm")
    with refused, warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        RgWeightNorm.apply(layer, "weight", 0)
    assert sorted(name for name, _ in layer.named_parameters()) == ["bias", "weight_g", "weight_v"]
