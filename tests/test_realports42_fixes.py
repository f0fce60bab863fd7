"""Regression tests for the defects the real ports of training techniques exposed
(``tests/test_real_ports_251.py`` .. ``_254.py``); expected values from torch."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

import retrograd as rg


def _adam_step_on_a_bias_given_state(lib, weight, bias):
    """``layer.bias.data = deepcopy(state_dict())["bias"]`` then an Adam step: the bias and
    the state value after it (torch: one storage)."""
    layer = lib.nn.Linear(2, 1)
    layer.load_state_dict({"weight": lib.tensor(weight), "bias": lib.tensor(bias)})
    initial = copy.deepcopy(layer.state_dict())
    layer.bias.data = initial["bias"]
    optimizer = lib.optim.Adam(layer.parameters(), lr=0.1)
    loss = layer(lib.ones(3, 2)).sum()
    if lib is torch:
        loss.backward()
        optimizer.step()
    else:
        optimizer.step(loss.backward())
    return np.array(layer.bias.detach().numpy()), np.array(initial["bias"].numpy())


def test_regression_data_set_from_a_state_dict_value_shares_its_storage_as_torchs():
    weight = np.array([[0.3, -0.2]], dtype=np.float32)
    bias = np.array([0.5], dtype=np.float32)
    their_bias, their_value = _adam_step_on_a_bias_given_state(torch, weight, bias)
    our_bias, our_value = _adam_step_on_a_bias_given_state(rg, weight, bias)
    assert their_bias == pytest.approx(0.4) and their_value == pytest.approx(0.4)
    np.testing.assert_allclose(our_bias, their_bias, rtol=1e-6)
    np.testing.assert_allclose(our_value, their_value, rtol=1e-6)


def test_regression_data_set_from_a_state_dict_value_takes_its_shape_and_dtype():
    layer = rg.nn.Linear(3, 2)
    other = rg.nn.Linear(3, 4).double()
    layer.bias.data = other.state_dict()["bias"]
    assert tuple(layer.bias.shape) == (4,) and layer.bias.dtype == rg.float64
    np.testing.assert_array_equal(layer.bias.detach().numpy(), other.bias.detach().numpy())
    assert layer.bias.requires_grad


def test_regression_data_set_from_a_plain_array_is_still_refused():
    layer = rg.nn.Linear(3, 2)
    with pytest.raises(rg.DTypeError, match="data: expected a tensor, got ndarray"):
        layer.bias.data = np.zeros(2, dtype=np.float32)
    assert layer(rg.ones(1, 3)).shape == (1, 2)
