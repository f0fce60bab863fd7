"""Defects found while porting the metric and contrastive learning programs
(tests/test_real_ports_440.py .. _443.py): ``torch.cat``/``torch.stack`` of a state dict's
entries (tensors in torch; :class:`StateValue` arrays here), which failed with an internal
message (``type object 'StateValue' has no attribute '_result'``)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg


def _twin_linears():
    """A torch ``Linear`` with a long buffer and a retrograd one loaded from its state."""
    torch.manual_seed(0)
    theirs = torch.nn.Linear(3, 2)
    theirs.register_buffer("queue_ptr", torch.tensor([5]))
    ours = rg.nn.Linear(3, 2)
    ours.register_buffer("queue_ptr", rg.zeros(1, dtype=rg.long))
    ours.load_state_dict({k: v.numpy() for k, v in theirs.state_dict().items()})
    return ours, theirs


def test_cat_and_stack_take_state_dict_entries_as_torch():
    ours, theirs = _twin_linears()
    mine, reference = ours.state_dict(), theirs.state_dict()
    cases = [
        lambda lib, sd: lib.cat([sd["weight"].flatten(), sd["bias"], sd["queue_ptr"].float()]),
        lambda lib, sd: lib.cat([sd["bias"], lib.ones(2)]),
        lambda lib, sd: lib.cat([lib.ones(2), sd["bias"]]),
        lambda lib, sd: lib.stack([sd["bias"], sd["bias"] * 1], dim=1),
        lambda lib, sd: lib.cat([sd["queue_ptr"], sd["queue_ptr"]]),
    ]
    for case in cases:
        expected = case(torch, reference)
        got = case(rg, mine)
        assert isinstance(got, rg.Tensor)
        assert str(got.dtype).split(".")[-1] == str(expected.dtype).split(".")[-1]
        np.testing.assert_array_equal(got.numpy(), expected.numpy())


def test_cat_of_state_entries_reads_their_current_values_and_writes_nowhere():
    """The joined tensor is a copy: later writes to it leave the module alone, and an entry
    read after an update of its parameter joins the new values (as torch's shared storage)."""
    ours, _ = _twin_linears()
    state = ours.state_dict()
    with rg.no_grad():
        ours.bias.fill_(2.0)
    joined = rg.cat([state["bias"], state["bias"]])
    assert joined.tolist() == [2.0] * 4
    joined[0] = 7.0
    assert ours.bias.tolist() == [2.0, 2.0]


@pytest.mark.parametrize("op", ["cat", "stack"])
def test_a_numpy_array_first_is_torchs_type_error(op):
    with pytest.raises(TypeError, match=r"expected Tensor as element 0 in argument 0"):
        getattr(torch, op)([np.ones(2), torch.ones(2)])
    with pytest.raises(
        rg.DTypeError,
        match=rf"{op}\(\): expected Tensor as element 0 in argument 0, but got numpy.ndarray",
    ):
        getattr(rg, op)([np.ones(2), rg.ones(2)])


def test_functions_take_state_dict_entries_as_torch():
    """``torch.where``/``torch.add``/``torch.exp`` of a state dict's entries (tensors in torch)
    were refused (``must be a Tensor, not StateValue``) or failed inside (``where``'s
    ``StopIteration``)."""
    ours, theirs = _twin_linears()
    mine, reference = ours.state_dict(), theirs.state_dict()
    cases = [
        lambda lib, sd: lib.where(sd["bias"] > 0, sd["bias"], 0.0),
        lambda lib, sd: lib.where(sd["bias"] > 0, lib.zeros(2), sd["bias"]),
        lambda lib, sd: lib.add(sd["bias"], 1),
        lambda lib, sd: lib.exp(sd["weight"]),
        lambda lib, sd: lib.sum(sd["weight"], dim=1),
    ]
    for case in cases:
        expected = case(torch, reference)
        got = case(rg, mine)
        assert isinstance(got, rg.Tensor)
        np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-6)


def test_where_of_arrays_only_is_torchs_type_error():
    condition, values = np.array([True, False]), np.ones(2)
    message = r"where\(\) received an invalid combination of arguments - got \((numpy\.)?ndarray"
    with pytest.raises(TypeError, match=message):
        torch.where(condition, values, 0)
    with pytest.raises(rg.DTypeError, match=message):
        rg.where(condition, values, 0)
