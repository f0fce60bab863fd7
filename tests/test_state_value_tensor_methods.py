"""A state dict's values answer every tensor method, as torch's state-dict tensors do.

``Module.state_dict()`` gives :class:`~retrograd.nn.modules.state_value.StateValue` entries:
NumPy arrays (``np.savez`` and NumPy arithmetic take them) with torch's idioms. Code that
compares or edits two models' state dicts calls any tensor method on them
(``(a[k] - b[k]).abs().max()``, ``v.norm()``, ``v.clamp_(-c, c)``); until 6 December only the
methods the class defines answered, and the rest raised ``AttributeError``. Each case runs the
same expression on torch's state dict and on ours, from the same weights.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg

READS = {
    "abs().max()": lambda a, b: (a["weight"] - b["weight"]).abs().max(),
    "norm()": lambda a, b: a["weight"].norm(),
    "norm(p=1, dim=1)": lambda a, b: a["weight"].norm(p=1, dim=1),
    "sub().pow(2).sum()": lambda a, b: a["weight"].sub(b["weight"]).pow(2).sum(),
    "square().mean().sqrt()": lambda a, b: a["bias"].square().mean().sqrt(),
    "flatten().topk(2).values": lambda a, b: a["weight"].flatten().topk(2).values,
    "sign()": lambda a, b: a["weight"].sign(),
    "allclose": lambda a, b: a["weight"].allclose(a["weight"] * 1.0),
    "equal": lambda a, b: a["weight"].equal(b["weight"]),
    "count_nonzero()": lambda a, b: (a["weight"] > 0).count_nonzero(),
}

WRITES = {
    "clamp_": lambda v: v.clamp_(-0.1, 0.1),
    "abs_": lambda v: v.abs_(),
    "neg_": lambda v: v.neg_(),
    "addcmul_": lambda v: v.addcmul_(v, v, value=0.5),
    "masked_fill_": lambda v: v.masked_fill_(v > 0, 0.0),
}


def _pair(lib, seed):
    rng = np.random.default_rng(seed)
    layer = lib.nn.Linear(4, 3)
    with lib.no_grad():
        layer.weight.copy_(lib.tensor(rng.standard_normal((3, 4)).astype(np.float32)))
        layer.bias.copy_(lib.tensor(rng.standard_normal(3).astype(np.float32)))
    return layer


def _array(value):
    if isinstance(value, bool | int | float):
        return np.asarray(value)
    return np.asarray(value.detach().numpy() if hasattr(value, "detach") else value)


@pytest.mark.parametrize("name", list(READS))
def test_a_state_value_answers_a_tensor_method_as_torch(name):
    found = []
    for lib in (torch, rg):
        a, b = _pair(lib, 0).state_dict(), _pair(lib, 1).state_dict()
        found.append(_array(READS[name](a, b)))
    np.testing.assert_allclose(found[1], found[0], rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("name", list(WRITES))
def test_an_in_place_tensor_method_on_a_state_value_reaches_the_module(name):
    found = []
    for lib in (torch, rg):
        layer = _pair(lib, 2)
        value = layer.state_dict()["weight"]
        returned = WRITES[name](value)
        assert _array(returned).shape == (3, 4)
        found.append((_array(layer.weight), _array(value)))
    (theirs, their_value), (ours, our_value) = found
    np.testing.assert_allclose(ours, theirs, rtol=1e-6)
    np.testing.assert_allclose(our_value, their_value, rtol=1e-6)


def test_a_name_no_tensor_has_is_still_an_attribute_error():
    value = rg.nn.Linear(2, 1).state_dict()["weight"]
    with pytest.raises(AttributeError, match="no attribute 'not_a_method'"):
        _ = value.not_a_method
    assert not hasattr(value, "_not_private")
