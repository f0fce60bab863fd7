"""Defects found by round 64's random programs of parametrizations and pruning
(tests/test_random_64.py), each checked against torch."""

from __future__ import annotations

import pytest

import retrograd as rg

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN"])
def test_recurrent_input_of_another_dtype_raises_torchs_value_error(kind):
    # torch: ValueError "RNN input dtype (torch.float64) does not match weight dtype
    # (torch.float32)"; ours was a DTypeError (a TypeError), which torch's except missed
    with pytest.raises(ValueError, match="dtype"):
        getattr(torch.nn, kind)(3, 2)(torch.zeros(2, 1, 3, dtype=torch.float64))
    with pytest.raises(ValueError, match=rf"{kind}: input is float64 but weight_ih_l0 is float32"):
        getattr(rg.nn, kind)(3, 2)(rg.zeros(2, 1, 3).double())
    with pytest.raises(rg.DTypeError):  # (still the hierarchy's dtype error)
        getattr(rg.nn, kind)(3, 2)(rg.zeros(2, 1, 3).double())


def test_recurrent_cell_of_another_dtype_still_raises_runtime_error():
    # torch's cells: RuntimeError "mat1 and mat2 must have the same dtype"
    with pytest.raises(RuntimeError):
        torch.nn.LSTMCell(3, 2)(torch.zeros(1, 3, dtype=torch.float64))
    with pytest.raises(RuntimeError, match="LSTMCell: input is float64 but weight_ih is float32"):
        rg.nn.LSTMCell(3, 2)(rg.zeros(1, 3).double())
