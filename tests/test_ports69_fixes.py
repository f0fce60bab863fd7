"""Defects found by the real ports of round 69 (``tests/test_real_ports_69b.py``, ``_69c``,
``_69d``), each checked against torch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg


def _pair():
    torch.manual_seed(0)
    theirs = torch.nn.Linear(3, 2)
    ours = rg.nn.Linear(3, 2)
    ours.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    return theirs, ours


@pytest.mark.parametrize("name", ["equal", "allclose"])
def test_equal_and_allclose_take_state_dict_entries_as_torch(name):
    # a checkpoint round trip checked by ``all(torch.equal(a, b) for a, b in zip(
    # model.state_dict().values(), restored.state_dict().values()))``: torch's entries are
    # tensors; retrograd's raised "'StateValue' object has no attribute 'eq'"
    theirs, ours = _pair()
    ts, os_ = theirs.state_dict(), ours.state_dict()
    f, g = getattr(torch, name), getattr(rg, name)
    for key in ts:
        assert g(os_[key], os_[key]) is f(ts[key], ts[key]) is True
        assert g(os_[key], os_[key] + 1) is f(ts[key], ts[key] + 1) is False
    assert g(os_["weight"], ours.weight) is f(ts["weight"], theirs.weight) is True
    assert g(ours.weight, os_["weight"]) is True


def test_isclose_takes_state_dict_entries_as_torch():
    theirs, ours = _pair()
    t = torch.isclose(theirs.state_dict()["bias"], theirs.bias + 1e-9).numpy()
    o = rg.isclose(ours.state_dict()["bias"], ours.bias + 1e-9).numpy()
    assert o.tolist() == t.tolist() == [True, True]


def test_norms_and_functional_ops_take_state_dict_entries_as_torch():
    # comparing two checkpoints layer by layer, as federated and model-merging scripts do:
    # ``torch.linalg.norm(a[k] - b[k])``, ``F.cosine_similarity(a[k].flatten(), ...)``; each
    # raised "expected a tensor, got StateValue" (a tensor in torch)
    theirs, ours = _pair()
    tw, ow = theirs.state_dict()["weight"], ours.state_dict()["weight"]
    pairs = [
        (torch.linalg.norm(tw), rg.linalg.norm(ow)),
        (torch.linalg.vector_norm(tw, ord=1), rg.linalg.vector_norm(ow, ord=1)),
        (torch.linalg.matrix_norm(tw), rg.linalg.matrix_norm(ow)),
        (
            torch.nn.functional.cosine_similarity(tw.flatten(), tw.flatten() * 2 + 1, dim=0),
            rg.nn.functional.cosine_similarity(ow.flatten(), ow.flatten() * 2 + 1, dim=0),
        ),
        (torch.nn.functional.normalize(tw, dim=0), rg.nn.functional.normalize(ow, dim=0)),
    ]
    for t, o in pairs:
        assert o.shape == tuple(t.shape)
        np.testing.assert_allclose(o.numpy(), t.numpy(), rtol=1e-6, atol=1e-7)
